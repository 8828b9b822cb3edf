#!/usr/bin/env python3
"""How much of the held-out translation data also occurs in training, and what BLEU is without it.

The split is by source package, but DDTP reuses one translation for identical English text, so
boilerplate ("This package contains the shared library.") crosses packages and therefore splits.
This script counts held-out items (test short descriptions, and the first --n-paragraphs test
paragraphs that evaluate-translation scores) whose normalized English (case and whitespace folded)
equals a training item's English (short descriptions and paragraphs alike), then translates them
through the served C++ path and scores BLEU / chrF on all of them, on the unseen ones only, and on
the seen ones.

  PYTHONPATH=models /usr/bin/python3 -m experiments.translation_overlap --start build/server/odeserve \\
      --model_repository models/repository --model translate-en-de
"""
import argparse
import os
import re
import sys


from odeserve_models.evaluate.eval_translation import pairs_of, score, translate_all, write_report
from odeserve_models.data import translation_pairs
from odeserve_models.paths import MODELS
from odeserve_models.served import Served


def normalized(text):
    return re.sub(r"\s+", " ", text.strip().lower())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", default="")
    ap.add_argument("--start", default="")
    ap.add_argument("--model_repository", default=os.path.join(MODELS, "repository"))
    ap.add_argument("--grpc_port", type=int, default=50091)
    ap.add_argument("--metrics_port", type=int, default=9191)
    ap.add_argument("--model", default="translate-en-de")
    ap.add_argument("--points", default="6:6,6:3", help="encoder:decoder step pairs")
    ap.add_argument("--n-paragraphs", type=int, default=400)
    ap.add_argument("--out", default=os.path.join(MODELS, "work", "eval", "translation-overlap.json"))
    a = ap.parse_args()
    train_en = {normalized(r["en"]) for r in translation_pairs("train")}
    datasets = {"test-short": translation_pairs("test", "short"),
                "test-paragraphs": translation_pairs("test", "para")[:a.n_paragraphs]}
    out = dict(command=" ".join(sys.argv), train_items=len(translation_pairs("train")), datasets={}, results=[])
    for name, rows in datasets.items():
        seen = [normalized(r["en"]) in train_en for r in rows]
        out["datasets"][name] = dict(n=len(rows), english_seen_in_train=sum(seen))
        print(name, out["datasets"][name], flush=True)
    with Served(a.address, a.start, a.model_repository, a.grpc_port, a.metrics_port,
                log_path=os.path.join(MODELS, "work", "logs", "translation-overlap-server.log")) as served:
        for name, rows in datasets.items():
            seen = [normalized(r["en"]) in train_en for r in rows]
            for enc, dec in pairs_of(a.points):
                for beam in (1, 4):
                    hyps, _ = translate_all(served, a.model, [r["en"] for r in rows], enc, dec, beam)
                    refs = [r["de"] for r in rows]
                    row = dict(dataset=name, encoder_steps=enc, decoder_steps=dec, beam=beam)
                    for part, keep in (("all", lambda s: True), ("unseen", lambda s: not s), ("seen", lambda s: s)):
                        idx = [i for i, s in enumerate(seen) if keep(s)]
                        row[part] = dict(n=len(idx), **score([hyps[i] for i in idx], [refs[i] for i in idx]))
                    out["results"].append(row)
                    print(row, flush=True)
    write_report(a.out, out)


if __name__ == "__main__":
    main()
