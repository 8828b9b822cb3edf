#!/usr/bin/env python3
"""Unigram statistics of the masked-LM corpus, the scale for train --objective mlm's loss:
the entropy (nats) of the SentencePiece pieces over every distinct description train reads
(English sections with a long description, both sides of the en <-> xx pairs), first 62 pieces
of each (what fits 64 positions with BOS/EOS), and the share of the most frequent piece.

    PYTHONPATH=models /usr/bin/python3 -m experiments.corpus_unigram --tokenizer models/repository/embed-sharebert/tokenizer.model
"""
import argparse
import collections
import math


import sentencepiece as spm

from odeserve_models.data import load_jsonl
from odeserve_models.train.train import PAIR_LANGS


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    a = ap.parse_args()
    sp = spm.SentencePieceProcessor(model_file=a.tokenizer)
    texts = set()
    for r in load_jsonl("sections-train-en.jsonl"):
        if r["long"]:
            texts.update([r["text"], r["short"]])
    for lang in PAIR_LANGS:
        try:
            for r in load_jsonl("pairs-train-%s.jsonl" % lang):
                texts.update([r["en"], r["xx"]])
        except FileNotFoundError:
            pass
    counts = collections.Counter()
    for t in texts:
        counts.update(sp.encode(t)[:62])
    total = sum(counts.values())
    entropy = -sum(v / total * math.log(v / total) for v in counts.values())
    print("texts %d  pieces %d  unigram entropy %.2f nats  most frequent piece %.1f%%"
          % (len(texts), total, entropy, 100 * counts.most_common(1)[0][1] / total))


if __name__ == "__main__":
    main()
