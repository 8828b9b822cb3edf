"""Baselines on the same test sets as evaluate: majority class, TF-IDF + logistic
regression (word 1-2 grams, numpy softmax regression) on the full texts and on each text's first
N pieces (the models' windows), TF-IDF char 2-4-gram cosine retrieval.
    PYTHONPATH=models nice -n 10 /usr/bin/python3 -m odeserve_models eval-baselines  -> models/work/eval/baselines.json"""
import json
import os
import time
from collections import Counter

import numpy as np
import sentencepiece as spm
from odeserve_models.baselines import char_tfidf_retrieval, fit_tfidf_lr, macro_f1, predict
from odeserve_models.cli import parser
from odeserve_models.data import load_jsonl
from odeserve_models.evaluate.eval_sets import eval_sets
from odeserve_models.paths import MODELS


def first_pieces(tokenizer, n):
    """text -> the text of its first n SentencePiece pieces (what a model with that window reads)."""
    sp = spm.SentencePieceProcessor(model_file=tokenizer)
    return lambda text: sp.decode(sp.encode(text)[:n])


def tfidf_classifier(train, valid, ytr, yva, n_labels, view):
    # each text cut once: SentencePiece over 48k texts is not free
    vec, W, b = fit_tfidf_lr([view(r["text"]) for r in train], ytr, [view(r["text"]) for r in valid], yva, n_labels,
                             log=lambda msg: print(msg, flush=True))
    return lambda texts: predict(vec.transform([view(t) for t in texts]), W, b)


def main(argv=None) -> int:
    ap = parser("eval-baselines", __doc__)
    ap.add_argument("--truncate-pieces", default="62,126",
                    help="also train and test TF-IDF + LR on each text's first N pieces (a model's window "
                         "without bos/eos), for each N of this comma list")
    ap.add_argument("--tokenizer", default=os.path.join(MODELS, "repository", "classify-sections", "tokenizer.model"))
    ap.add_argument("--retrieval-only", action="store_true",
                    help="only the retrieval baselines (seconds, not minutes), to --out")
    ap.add_argument("--out", default=os.path.join(MODELS, "work", "eval", "baselines.json"))
    a = ap.parse_args(argv)
    t0 = time.time()
    sets = eval_sets()
    labels = sets["labels"]; lid = {l: i for i, l in enumerate(labels)}
    train = load_jsonl("sections-train-en.jsonl")
    valid = load_jsonl("sections-valid-en.jsonl")
    ytr = np.array([lid[r["label"]] for r in train]); yva = np.array([lid[r["label"]] for r in valid])
    res = {"labels": labels}
    maj = Counter(ytr.tolist()).most_common(1)[0][0]
    views = [] if a.retrieval_only else [("tfidf_lr", lambda text: text)] + [
        ("tfidf_lr_first%d" % n, first_pieces(a.tokenizer, n)) for n in map(int, filter(None, a.truncate_pieces.split(",")))]
    classifiers = [(key, tfidf_classifier(train, valid, ytr, yva, len(labels), view)) for key, view in views]
    print("classifiers trained in %.0fs" % (time.time() - t0), flush=True)
    for name, (texts, y) in ({} if a.retrieval_only else sets["classification"]).items():
        y = np.array([lid[l] for l in y])
        for key, classify in classifiers:
            p = classify(texts)
            res[key + "/" + name] = {"accuracy": float((p == y).mean()), "macro_f1": macro_f1(y, p, len(labels)), "n": len(y)}
        pm = np.full_like(y, maj)
        res["majority/" + name] = {"accuracy": float((pm == y).mean()), "macro_f1": macro_f1(y, pm, len(labels)), "n": len(y),
                                   "class": labels[maj]}
        print(name, {key: round(res[key + "/" + name]["accuracy"], 4) for key, _ in classifiers},
              "majority", round(res["majority/" + name]["accuracy"], 4), flush=True)
    for name, (q, c) in sets["retrieval"].items():
        # Vocabulary and IDF from the training pairs of the same language pair (both sides).
        train_pairs = load_jsonl("pairs-train-%s.jsonl" % name.rsplit("-", 1)[-1])
        r = char_tfidf_retrieval(q, c, fit_texts=[p["en"] for p in train_pairs] + [p["xx"] for p in train_pairs])
        res["tfidf_char/" + name] = {"recall@1": r[1], "recall@10": r[10], "n": len(q), "fit": "train pairs"}
        # The earlier baseline, fitted on the test queries and candidates themselves (transductive).
        r = char_tfidf_retrieval(q, c)
        res["tfidf_char_fit_on_test/" + name] = {"recall@1": r[1], "recall@10": r[10], "n": len(q)}
        print(name, res["tfidf_char/" + name], "fitted on the test texts:", res["tfidf_char_fit_on_test/" + name],
              flush=True)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    json.dump(res, open(a.out, "w"), indent=1)
    print("done in %.0fs" % (time.time() - t0))
    return 0
