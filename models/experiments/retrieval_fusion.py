#!/usr/bin/env python3
"""How far could a hybrid of a served embedder and TF-IDF go on en -> de retrieval? Scores each
validation query against every candidate by cosine(embedding) + w * cosine(TF-IDF) and reports
recall@1 for the best w of a grid, beside each part alone. Validation data only (the profile set:
1,000 en -> de pairs), TF-IDF fitted on the training pairs as the baseline is.

    PYTHONPATH=models nice /usr/bin/python3 -m experiments.retrieval_fusion [--steps 8]
"""
import argparse
import os

import numpy as np
import torch

from odeserve_models.evaluate.eval_sets import profile_sets
from odeserve_models.baselines import Tfidf, char_features, recall_at_k
from odeserve_models.data import Encoded, load_jsonl
from odeserve_models.evaluation import Runner
from odeserve_models.paths import MODELS
from odeserve_models.text import Tokenizer
from odeserve_models.verify import load_model_dir

WEIGHTS = (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    queries, candidates = profile_sets()["retrieval-valid-en-de"]
    train = load_jsonl("pairs-train-de.jsonl")
    fit = [r["en"] for r in train] + [r["xx"] for r in train]
    tok = Tokenizer(os.path.join(MODELS, "repository", "embed-sharebert", "tokenizer.model"), 64)

    def pieces(text):
        ids = tok.ids(text)
        return [str(i) for i in ids] + ["%d_%d" % pair for pair in zip(ids, ids[1:])]

    lexical = {}
    for name, featurize in (("char 2-4-grams", char_features), ("piece uni+bigrams", pieces)):
        vec = Tfidf(featurize, min_df=2, max_features=200000).fit(fit)
        lexical[name] = (vec.transform(queries) @ vec.transform(candidates).T).toarray()
        print("TF-IDF %s alone: recall@1 %.4f" % (name, recall_at_k(lexical[name])[1]), flush=True)
    for model in ("embed-eelbert", "embed-sharebert"):
        _, tk, module = load_model_dir(os.path.join(MODELS, "repository", model))
        runner = Runner(module, Encoded(tk))
        q, c = runner.outputs(queries, a.steps), runner.outputs(candidates, a.steps)
        q /= np.linalg.norm(q, axis=1, keepdims=True)
        c /= np.linalg.norm(c, axis=1, keepdims=True)
        dense = q @ c.T
        print("%s at %d steps alone: recall@1 %.4f" % (model, a.steps, recall_at_k(dense)[1]), flush=True)
        for name, sim in lexical.items():
            best = max((recall_at_k(dense + w * sim)[1], w) for w in WEIGHTS)
            print("  + w x TF-IDF %s: best recall@1 %.4f at w = %g (grid %s)" % (name, best[0], best[1], WEIGHTS), flush=True)


if __name__ == "__main__":
    main()
