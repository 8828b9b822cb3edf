"""Test-set evaluation through the Python mirror of the server's solver loop (fp32).

  PYTHONPATH=models nice -n 10 /usr/bin/python3 -m odeserve_models evaluate repo:classify-sections
  PYTHONPATH=models nice -n 10 /usr/bin/python3 -m odeserve_models evaluate repo:embed-sharebert
  PYTHONPATH=models nice -n 10 /usr/bin/python3 -m odeserve_models evaluate run:sharebert-fixed      # comparison run (not served)
  PYTHONPATH=models nice -n 10 /usr/bin/python3 -m odeserve_models evaluate repo:classify-sections --repository DIR --out-name X
Writes models/work/eval/<target>.json; models/odeserve_models/report/make_report.py turns them into models/EVAL.md.
"""
import json
import os
import time

import numpy as np
import torch

from odeserve_models.cli import parser
from odeserve_models.evaluate.eval_sets import eval_sets
from odeserve_models.data import Encoded
from odeserve_models.evaluation import Runner, classification_metrics, load_run, retrieval_metrics
from odeserve_models.paths import MODELS
from odeserve_models.verify import load_model_dir

CLS_EN = [("EULER", n) for n in range(1, 9)] + [("EULER", 16), ("HEUN", 1), ("HEUN", 2), ("HEUN", 4), ("RK4", 1), ("RK4", 2)]
CLS_ZS = [("EULER", 2), ("EULER", 4), ("EULER", 8)]
RET = [("EULER", 1), ("EULER", 2), ("EULER", 4), ("EULER", 8), ("HEUN", 2), ("RK4", 2)]
N_EN, N_ZS = 1000, 500


def main(argv=None) -> int:
    ap = parser("evaluate", __doc__)
    ap.add_argument("target", help="repo:NAME (a served model folder) or run:NAME (models/work/runs/NAME)")
    ap.add_argument("--repository", default=os.path.join(MODELS, "repository"), help="where repo:NAME lives")
    ap.add_argument("--out-name", default="", help="write models/work/eval/OUT_NAME.json (default: NAME)")
    a = ap.parse_args(argv)
    target = a.target
    torch.set_num_threads(int(os.environ.get("EVAL_THREADS", "1")))
    kind, name = target.split(":")
    sets = eval_sets()
    labels = sets["labels"]; lid = {l: i for i, l in enumerate(labels)}
    res = {"target": target, "results": []}
    t0 = time.time()

    def add(task, dataset, solver, n, metrics, count):
        res["results"].append(dict(task=task, dataset=dataset, solver=solver, steps=n, n=count, **metrics))
        print("%-26s %-6s %2d %s  (%.0fs)" % (dataset, solver, n, {k: round(v, 4) for k, v in metrics.items()}, time.time() - t0), flush=True)

    tasks = []
    if kind == "repo":
        d = os.path.join(a.repository, name)
        cfg, tok, model = load_model_dir(d)
        task = cfg["task"]
        res["size_bytes"] = {f: os.path.getsize(os.path.join(d, f)) for f in sorted(os.listdir(d))}
        res["parameters"] = int(open(os.path.join(d, "config.pbtxt")).read().split("parameters:")[1].split()[0])
        runners = {task: Runner(model, Encoded(tok))}
        res["trained_depth"] = cfg["trained_depth"]
        tasks = [task]
    else:
        runners = {}
        for task in ("CLASSIFICATION", "EMBEDDING"):
            model, enc, args, _ = load_run(os.path.join(MODELS, "work", "runs", name), task)
            runners[task] = Runner(model, enc)
            res["trained_depth"] = args["depth"]; res["steps_mode"] = args["steps_mode"]
        res["train_steps"] = torch.load(os.path.join(MODELS, "work", "runs", name, "final.pt"))["state"]["step"]
        tasks = ["CLASSIFICATION", "EMBEDDING"]
    L = res["trained_depth"]
    if "CLASSIFICATION" in tasks:
        r = runners["CLASSIFICATION"]
        texts, y = sets["classification"]["sections-test-en"]
        texts, y = texts[:N_EN], np.array([lid[l] for l in y[:N_EN]])
        grid = CLS_EN if kind == "repo" else [("EULER", n) for n in range(1, L + 1)]
        experts = hasattr(r.model, "experts")  # a product of experts: its lexical expert (and probe) alone too

        def add_experts(dataset, texts, y):
            alone = r.expert_outputs(texts, L)
            add("CLASSIFICATION", dataset, "LEXICAL", 0, classification_metrics(alone["lexical"], y, len(labels)), len(y))
            if "probe" in alone:
                add("CLASSIFICATION", dataset, "PROBE", L, classification_metrics(alone["probe"], y, len(labels)), len(y))
        for solver, n in grid:
            add("CLASSIFICATION", "sections-test-en", solver, n, classification_metrics(r.outputs(texts, n, solver), y, len(labels)), len(y))
        if experts:
            add_experts("sections-test-en", texts, y)
        for lang in ("de", "fr", "it", "da"):
            texts, y = sets["classification"]["sections-test-" + lang]
            texts, y = texts[:N_ZS], np.array([lid[l] for l in y[:N_ZS]])
            for solver, n in (CLS_ZS if kind == "repo" else [("EULER", L)]):
                add("CLASSIFICATION", "sections-test-" + lang, solver, n, classification_metrics(r.outputs(texts, n, solver), y, len(labels)), len(y))
            if experts:
                add_experts("sections-test-" + lang, texts, y)
    if "EMBEDDING" in tasks:
        r = runners["EMBEDDING"]
        q, c = sets["retrieval"]["retrieval-test-en-de"]
        for solver, n in RET:
            add("EMBEDDING", "retrieval-test-en-de", solver, n, retrieval_metrics(r.outputs(q, n, solver), r.outputs(c, n, solver)), len(q))
        q, c = sets["retrieval"]["retrieval-test-en-fr"]
        add("EMBEDDING", "retrieval-test-en-fr", "EULER", L, retrieval_metrics(r.outputs(q, L), r.outputs(c, L)), len(q))
    os.makedirs(os.path.join(MODELS, "work", "eval"), exist_ok=True)
    json.dump(res, open(os.path.join(MODELS, "work", "eval", (a.out_name or name) + ".json"), "w"), indent=1)
    print("done in %.0fs" % (time.time() - t0))
    return 0
