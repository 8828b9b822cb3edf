"""The fixed evaluation sets (test split; deterministic subsets) shared by every evaluator:
evaluate (Python path), eval-baselines, evaluate-served (gRPC path)."""
import json
import os
import random

from odeserve_models.data import ZERO_SHOT_LANGUAGES, load_jsonl
from odeserve_models.paths import MODELS

N_EN = 1000        # English section test subset
N_ZS = 500         # per language, zero-shot section test subset
N_RET = 1000       # en -> xx retrieval: queries and candidates
ZS_LANGS = list(ZERO_SHOT_LANGUAGES)


def _subset(rows, n, seed):
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    return rows[:n]


def eval_sets():
    labels = json.load(open(os.path.join(MODELS, "data", "manifest.json")))["labels"]
    out = {"labels": labels, "classification": {}, "retrieval": {}}
    en = _subset(load_jsonl("sections-test-en.jsonl"), N_EN, 11)
    out["classification"]["sections-test-en"] = ([r["text"] for r in en], [r["label"] for r in en])
    for lang in ZS_LANGS:
        rows = _subset(load_jsonl("sections-test-%s.jsonl" % lang), N_ZS, 12)
        out["classification"]["sections-test-" + lang] = ([r["text"] for r in rows], [r["label"] for r in rows])
    for lang in ["de", "fr"]:
        rows = _subset(load_jsonl("pairs-test-%s.jsonl" % lang), N_RET, 13)
        out["retrieval"]["retrieval-test-en-" + lang] = ([r["en"] for r in rows], [r["xx"] for r in rows])
    return out


def profile_sets():
    """Held-out VALIDATION subsets used for the quality.pbtxt profiles shipped with the models."""
    labels = json.load(open(os.path.join(MODELS, "data", "manifest.json")))["labels"]
    va = _subset(load_jsonl("sections-valid-en.jsonl"), 1000, 21)
    pr = _subset(load_jsonl("pairs-valid-de.jsonl"), 1000, 22)
    return {"labels": labels, "sections-valid-en": ([r["text"] for r in va], [r["label"] for r in va]),
            "retrieval-valid-en-de": ([r["en"] for r in pr], [r["xx"] for r in pr])}
