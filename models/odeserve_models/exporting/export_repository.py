"""Export a trained run as a served model folder with a quality profile measured on held-out
VALIDATION data through the Python mirror of the server's solver loop (fp32, TorchScript as saved).

  PYTHONPATH=models nice -n 10 /usr/bin/python3 -m odeserve_models export-repository --run models/work/runs/sharebert-robust \
      --name embed-sharebert --task EMBEDDING [--out models/repository]
"""
import os
import time

import numpy as np
import torch

from odeserve_models.cli import parser
from odeserve_models.evaluate.eval_sets import profile_sets
from odeserve_models.data import Encoded
from odeserve_models.evaluation import Runner, classification_metrics, load_run, retrieval_metrics
from odeserve_models.export import config_text, export_model, quality_text, unresolvable_gap
from odeserve_models.paths import MODELS, ROOT
from odeserve_models.verify import load_model_dir, verify_model_dir

DESCRIPTIONS = {
    "sharebert": "ShareBERT-style parameter-shared encoder: stored embeddings E (8k x {emb}), shared "
                 "pre-LN block whose Q/K/V/O/FFN matrices are column slices of M = E W + b, materialized "
                 "once in prepare(); H={hidden}, {heads} heads, FFN {ffn}, L={depth}; {how}",
    "eelbert": "EELBERT-style encoder without an embedding table: hashed character 2/3/4-gram features "
               "(dim {hash_dim}) of each SentencePiece piece, computed by the server, projected by a small "
               "MLP; one shared pre-LN block, H={hidden}, {heads} heads, FFN {ffn}, L={depth}; {how}",
    "albert": "ALBERT-style encoder: factorized embeddings (8k x {emb} -> H), one shared pre-LN block, "
              "H={hidden}, {heads} heads, FFN {ffn}, L={depth}; {how}",
}
# languages with >= 1,000 training pairs (nl, fi, sv had only 135-352 and are left out)
LANGS = ["en", "de", "fr", "it", "da", "es", "pt", "ru", "pl", "ja", "cs"]


# Inputs each profile point is measured on: the validation descriptions (classification) and the
# en -> de queries (retrieval, among as many candidates).
PROFILE_ITEMS = {"CLASSIFICATION": 600, "EMBEDDING": 300}


def profile(runner, task, sets, L):
    grid = [("EULER", n) for n in range(1, L + 1)] + [("EULER", 2 * L)] + \
           [("HEUN", n) for n in (1, 2, 4)] + [("RK4", n) for n in (1, 2)]
    pts = []
    labels = sets["labels"]; lid = {l: i for i, l in enumerate(labels)}
    for solver, n in grid:
        t = time.time()
        if task == "CLASSIFICATION":
            texts, y = sets["sections-valid-en"]
            items = PROFILE_ITEMS[task]
            texts, y = texts[:items], y[:items]
            m = classification_metrics(runner.outputs(texts, n, solver), np.array([lid[l] for l in y]), len(labels))
            pts.append(dict(solver=solver, steps=n, metric="accuracy", value=m["accuracy"], dataset="sections-valid-en (%d)" % len(y)))
            pts.append(dict(solver=solver, steps=n, metric="macro_f1", value=m["macro_f1"],
                            dataset="sections-valid-en (%d)" % len(y)))
        else:
            q, c = sets["retrieval-valid-en-de"]
            items = PROFILE_ITEMS[task]
            q, c = q[:items], c[:items]
            m = retrieval_metrics(runner.outputs(q, n, solver), runner.outputs(c, n, solver))
            for k in ("recall@1", "recall@10"):
                pts.append(dict(solver=solver, steps=n, metric=k, value=m[k],
                                dataset="retrieval-valid-en-de (%d queries x %d candidates)" % (len(q), len(c))))
        print("  profile", solver, n, {p["metric"]: round(p["value"], 4) for p in pts[-2:]}, "%.0fs" % (time.time() - t), flush=True)
    return ("accuracy" if task == "CLASSIFICATION" else "recall@1"), pts


def main(argv=None) -> int:
    ap = parser("export-repository", __doc__)
    ap.add_argument("--run", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--task", required=True, choices=["EMBEDDING", "CLASSIFICATION"])
    ap.add_argument("--out", default=os.path.join(MODELS, "repository"))
    ap.add_argument("--version", default="1")
    ap.add_argument("--compute-precision", default="FLOAT32", choices=["FLOAT32", "BFLOAT16"],
                    help="config.pbtxt compute_precision (the server's bfloat16 autocast option)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quality-tolerance", default="0",
                    help="config quality_tolerance: step choice takes the cheapest point within this of the best; "
                         "'auto': the largest gap the profile's inputs cannot resolve (unresolvable_gap)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    model, enc, args, labels = load_run(a.run, a.task)
    L = args["depth"]
    how = ("step-robust training (Euler steps n sampled per batch, dt = L/n)" if args["steps_mode"] == "robust"
           else "fixed-depth training") + \
          ("; contrastive en<->xx and long<->short description pairs" if a.task == "EMBEDDING"
           else "; Debian Section classifier trained on English descriptions only (%s)" % (
               "fine-tuned from the jointly trained encoder, English cross-entropy plus en<->xx alignment pairs"
               if args.get("objective") == "classify" else "jointly with the contrastive objective"))
    if a.task == "EMBEDDING" and args.get("init"):
        how += "; training continued from an earlier export (%s at the time)" % args["init"]
    if a.task == "CLASSIFICATION" and args.get("lexical"):
        lx = args["lexical"]
        how += ("; times a lexical expert (log-probabilities added with weight %.2f): a linear layer over the "
                "window's piece unigrams and %d hashed piece bigrams, trained on English sections, carried in "
                "%d extra state channels that the field leaves unchanged" % (lx["weight"], lx["buckets"], len(labels)))
    if a.task == "CLASSIFICATION" and args.get("probe"):
        pr = args["probe"]
        how += ("; times a cross-lingual expert (weight %.2f): a linear probe, trained on English sections, on the "
                "normalized sentence embedding of embed-eelbert's frozen encoder (H=%d, its own shared block evolved "
                "in the same ODE state over the first %d pieces; hashed n-gram features of each vocabulary piece "
                "precomputed at export)" % (pr["product_weight"], pr["embedder_hidden"], pr["window"]))
    desc = DESCRIPTIONS[args["family"]].format(how=how, **args)
    hash_cfg = dict(dim=args["hash_dim"], seed=args["hash_seed"], orders=[2, 3, 4]) if args["family"] == "eelbert" else None
    cfg = config_text(a.name, model, a.task, desc, args["max_len"], steps=(1, 2 * L, L),
                      labels=labels if a.task == "CLASSIFICATION" else (), languages=LANGS,
                      hash_cfg=hash_cfg, version=a.version, compute_precision=a.compute_precision,
                      quality_tolerance=(unresolvable_gap(PROFILE_ITEMS[a.task]) if a.quality_tolerance == "auto"
                                         else float(a.quality_tolerance)))
    # export first (with a placeholder-free profile written after measuring the exported file)
    d = export_model(a.out, a.name, model, args["tokenizer"], cfg, quality_text("pending", []))
    cfg_d, tok_d, m_d = load_model_dir(d)
    runner = Runner(m_d, Encoded(tok_d))
    t = time.time()
    metric, pts = profile(runner, a.task, profile_sets(), L)
    with open(os.path.join(d, "quality.pbtxt"), "w") as f:
        f.write(quality_text(metric, pts))
    texts = profile_sets()["sections-valid-en"][0][:16]
    print(a.name, verify_model_dir(d, texts, proto_root=os.path.join(ROOT, "proto")))
    sizes = {f: os.path.getsize(os.path.join(d, f)) for f in sorted(os.listdir(d))}
    print(a.name, "files", sizes, "profile %.0fs" % (time.time() - t))
    return 0
