#!/usr/bin/env python3
"""How well a Marian-style lexical shortlist would cover en -> de translations: the N most frequent
German pieces of the training pairs, plus for each source piece the k target pieces that co-occur
with it most (Jaccard over the 32k training pairs). Reports the share of reference pieces of
validation pairs inside each row's list, the list's size, and the size of the union over a batch of
16 rows (what one decoder call would project onto). Measured, not served (docs: the closing note of
2026-12-02).

  PYTHONPATH=models nice /usr/bin/python3 -m experiments.shortlist_coverage [--pairs 1500]   # ~6 min, mostly counting
"""
import argparse
import collections
import os
import time

import numpy as np
import sentencepiece as spm

from odeserve_models.data import translation_pairs
from odeserve_models.paths import MODELS


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=os.path.join(MODELS, "repository", "translate-en-de", "tokenizer.model"))
    ap.add_argument("--pairs", type=int, default=1500, help="validation pairs measured")
    ap.add_argument("--frequent", default="100,300,1000")
    ap.add_argument("--per-source", default="10,30,100")
    ap.add_argument("--batch", type=int, default=16)
    a = ap.parse_args()
    t0 = time.time()
    sp = spm.SentencePieceProcessor(model_file=a.tokenizer)
    train, valid = translation_pairs("train"), translation_pairs("valid")[:a.pairs]
    with_source, source_count, target_count, target_freq = (collections.Counter() for _ in range(4))
    for r in train:
        source, target = set(sp.encode(r["en"])), sp.encode(r["de"])
        source_count.update(source); target_count.update(set(target)); target_freq.update(target)
        for s in source:
            for t in set(target):
                with_source[(s, t)] += 1
    ranked = collections.defaultdict(list)  # source piece -> [(Jaccard, target piece)], best first
    for (s, t), c in with_source.items():
        ranked[s].append((c / (source_count[s] + target_count[t] - c), t))
    for s in ranked:
        ranked[s].sort(reverse=True)
    print("counted %d training pairs in %.0fs" % (len(train), time.time() - t0), flush=True)
    sources = [set(sp.encode(r["en"])) for r in valid]
    references = [sp.encode(r["de"]) for r in valid]
    by_frequency = [t for t, _ in target_freq.most_common()]
    for n in map(int, a.frequent.split(",")):
        base = set(by_frequency[:n]) | {sp.eos_id()}
        for k in map(int, a.per_source.split(",")):
            lists = [base.union(t for s in S for _, t in ranked.get(s, [])[:k]) for S in sources]
            inside = sum(sum(t in lst for t in ref) for lst, ref in zip(lists, references))
            total = sum(len(ref) for ref in references)
            unions = [len(set().union(*lists[i:i + a.batch])) for i in range(0, len(lists) - a.batch + 1, a.batch)]
            print("frequent %4d, per source piece %3d: reference coverage %.4f, per row %.0f, union of %d rows %.0f" % (
                n, k, inside / total, np.mean([len(l) for l in lists]), a.batch, np.mean(unions)), flush=True)


if __name__ == "__main__":
    main()
