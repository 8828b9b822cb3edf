#!/usr/bin/env python3
"""How long texts are in a tokenizer's pieces, and the share a model window would cut.

  PYTHONPATH=models /usr/bin/python3 -m experiments.piece_lengths --window 62 models/data/raw/datasets/sections-test-en.jsonl \
      tests/fixtures/descriptions-sample.txt
A .jsonl file is read as records with a "text" field; any other file as one text per line.
"""
import argparse
import json
import os

import numpy as np
import sentencepiece as spm

from odeserve_models.paths import MODELS



def texts_of(path):
    with open(path, encoding="utf-8") as f:
        if path.endswith(".jsonl"):
            return [json.loads(line)["text"] for line in f]
        return [line.strip() for line in f if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--window", type=int, default=62, help="pieces a model reads (its max length without bos/eos)")
    ap.add_argument("--tokenizer", default=os.path.join(MODELS, "repository", "classify-sections", "tokenizer.model"))
    a = ap.parse_args()
    sp = spm.SentencePieceProcessor(model_file=a.tokenizer)
    for path in a.files:
        n = np.array([len(ids) for ids in sp.encode(texts_of(path))])
        print("%s: %d texts, pieces median %.0f, p90 %.0f, max %d; longer than %d: %.1f%%" % (
            path, len(n), np.median(n), np.percentile(n, 90), n.max(), a.window, 100 * (n > a.window).mean()))


if __name__ == "__main__":
    main()
