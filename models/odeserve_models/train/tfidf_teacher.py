"""Out-of-fold TF-IDF + logistic regression probabilities for every English training description,
the teacher of `train --objective classify --teacher`.

Each description's probabilities come from a model that never saw its source package: the
training split is cut into K folds by source package (descriptions of one source are often
near-copies, e.g. the firefox-esr-l10n-* packages), and each fold is predicted by TF-IDF + LR fitted
on the other K-1 (the baseline's own fit_tfidf_lr, as eval-baselines runs it: its epoch chosen
on the validation split). The test split is never read.

    PYTHONPATH=models nice -n 10 /usr/bin/python3 -m odeserve_models tfidf-teacher   # -> models/work/teacher/tfidf-oof.npz
"""
import hashlib
import json
import os
import time

import numpy as np
from odeserve_models.cli import parser
from odeserve_models.data import load_jsonl
from odeserve_models.paths import MODELS


def fold_of(source: str, folds: int) -> int:
    """A source package's fold, stable across runs and machines (not Python's salted hash)."""
    return int(hashlib.sha256(source.encode("utf-8")).hexdigest()[:8], 16) % folds


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(1, keepdims=True)


def main(argv=None) -> int:
    # Here, not at the top: importing fold_of (the tests) needs neither scipy nor the baselines
    from odeserve_models.baselines import fit_tfidf_lr, predict
    ap = parser("tfidf-teacher", __doc__)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(MODELS, "work", "teacher", "tfidf-oof.npz"))
    a = ap.parse_args(argv)
    t0 = time.time()
    labels = json.load(open(os.path.join(MODELS, "data", "manifest.json")))["labels"]
    lid = {l: i for i, l in enumerate(labels)}
    train = load_jsonl("sections-train-en.jsonl")
    valid = load_jsonl("sections-valid-en.jsonl")
    y = np.array([lid[r["label"]] for r in train]); yva = np.array([lid[r["label"]] for r in valid])
    valid_texts = [r["text"] for r in valid]
    fold = np.array([fold_of(r["source"], a.folds) for r in train])
    probs = np.zeros((len(train), len(labels)), np.float32)
    for k in range(a.folds):
        fit, held = np.where(fold != k)[0], np.where(fold == k)[0]
        vec, W, b = fit_tfidf_lr([train[i]["text"] for i in fit], y[fit], valid_texts, yva, len(labels),
                                 log=lambda msg: print(msg, flush=True))
        X_held = vec.transform([train[i]["text"] for i in held])
        probs[held] = softmax(np.asarray(X_held @ W + b))
        acc = float((predict(X_held, W, b) == y[held]).mean())
        print("fold %d: fitted on %d, held out %d, held-out accuracy %.4f (%.0fs)" % (
            k, len(fit), len(held), acc, time.time() - t0), flush=True)
    oof = float((probs.argmax(1) == y).mean())
    print("out-of-fold accuracy over the training split %.4f" % oof, flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    np.savez_compressed(a.out, md5=np.array([r["md5"] for r in train]), probs=probs, labels=np.array(labels),
                        folds=a.folds, oof_accuracy=oof)
    print("wrote", a.out, "in %.0fs" % (time.time() - t0))
    return 0
