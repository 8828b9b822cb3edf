#!/usr/bin/env python3
"""Accuracy of an exported classifier on training descriptions against validation descriptions
(how much better it fits what it was trained on), through the Python mirror of the server's
solver loop, fp32, one thread: 1,500 training rows (shuffled, seed 0) and the first 1,500
validation rows. The test split is not read.

  PYTHONPATH=models /usr/bin/python3 -m experiments.classifier_fit_gap [--model models/repository/classify-sections] [--steps 2,8]
"""
import argparse
import json
import os
import random

import numpy as np
import torch

from odeserve_models.data import Encoded, load_jsonl
from odeserve_models.evaluation import Runner
from odeserve_models.paths import MODELS
from odeserve_models.verify import load_model_dir


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(MODELS, "repository", "classify-sections"))
    ap.add_argument("--steps", default="2,8")
    ap.add_argument("--rows", type=int, default=1500)
    a = ap.parse_args()
    torch.set_num_threads(1)
    labels = json.load(open(os.path.join(MODELS, "data", "manifest.json")))["labels"]
    lid = {l: i for i, l in enumerate(labels)}
    _, tok, model = load_model_dir(a.model)
    runner = Runner(model, Encoded(tok))
    train = load_jsonl("sections-train-en.jsonl")
    random.Random(0).shuffle(train)
    splits = (("train", train[:a.rows]), ("valid", load_jsonl("sections-valid-en.jsonl")[:a.rows]))
    for name, rows in splits:
        texts = [r["text"] for r in rows]
        y = np.array([lid[r["label"]] for r in rows])
        for n in map(int, a.steps.split(",")):
            acc = float((runner.outputs(texts, n).argmax(1) == y).mean())
            print("%s (%d rows), Euler %d: accuracy %.4f" % (name, len(rows), n, acc), flush=True)


if __name__ == "__main__":
    main()
