"""Evaluate the served path: the same test sets as evaluate, through the running C++
server over gRPC (python3-grpcio; stubs generated at run time from proto/ with protoc and
/usr/bin/grpc_python_plugin into a temp dir).

  # against a running server
  PYTHONPATH=models /usr/bin/python3 -m odeserve_models evaluate-served --address localhost:50051
  # or start one (and stop it afterwards)
  PYTHONPATH=models /usr/bin/python3 -m odeserve_models evaluate-served --start /work/main/build/server/odeserve \
      --model_repository models/repository --grpc_port 50071 --metrics_port 9171
Writes models/work/eval/served.json (report adds it to EVAL.md as served-path figures).
"""
import json
import os
import time

import numpy as np

from odeserve_models.cli import command_line, parser
from odeserve_models.evaluate.eval_sets import eval_sets
from odeserve_models.baselines import macro_f1, recall_at_k
from odeserve_models.paths import MODELS
from odeserve_models.served import Served


def main(argv=None) -> int:
    ap = parser("evaluate-served", __doc__)
    ap.add_argument("--address", default="")
    ap.add_argument("--start", default="", help="server binary to start")
    ap.add_argument("--model_repository", default=os.path.join(MODELS, "repository"))
    ap.add_argument("--grpc_port", type=int, default=50071)
    ap.add_argument("--metrics_port", type=int, default=9171)
    ap.add_argument("--steps", default="2,4,8")
    ap.add_argument("--models", default="", help="comma list (default: every READY model)")
    ap.add_argument("--out", default=os.path.join(MODELS, "work", "eval", "served.json"))
    ap.add_argument("--n-en", type=int, default=1000)
    ap.add_argument("--n-zs", type=int, default=500)
    a = ap.parse_args(argv)
    served = Served(a.address, a.start, a.model_repository, a.grpc_port, a.metrics_port,
                    log_path=os.path.join(MODELS, "work", "logs", "served-server.log"))
    out = {"address": served.address, "command": command_line("evaluate-served", argv), "results": []}
    with served:
        pb, stub, models = served.pb, served.stub, served.models
        out["models"] = {n: dict(state=pb.ModelState.Name(m.state), error=m.error, device=m.device,
                                 compute_precision=pb.ComputePrecision.Name(m.compute_precision))
                         for n, m in models.items()}
        print(out["models"], flush=True)
        sets = eval_sets()
        labels = sets["labels"]; lid = {l: i for i, l in enumerate(labels)}
        steps = [int(s) for s in a.steps.split(",")]

        def batched(texts, per):
            for i in range(0, len(texts), per):
                yield texts[i:i + per]

        for name, m in models.items():
            if m.state != pb.READY or (a.models and name not in a.models.split(",")):
                continue
            per = max(1, min(m.max_inputs_per_request or 32, 32))
            L = m.trained_depth
            if m.task == pb.CLASSIFICATION:
                for ds, (texts, y) in sets["classification"].items():
                    lim = a.n_en if ds.endswith("-en") else a.n_zs
                    texts, y = texts[:lim], np.array([lid[l] for l in y[:lim]])
                    for n in (steps if ds.endswith("-en") else [L]):
                        pred, t0, times = [], time.time(), []
                        for chunk in batched(texts, per):
                            r = stub.Classify(pb.ClassifyRequest(model=name, inputs=chunk, top_k=1, truncate=True,
                                                                 compute=pb.ComputeOptions(steps=n, solver=pb.EULER)), timeout=120)
                            pred.extend(lid[res.labels[0].label] for res in r.results)
                            times.append(r.report.total_time.ToTimedelta().total_seconds())
                        pred = np.array(pred)
                        row = dict(model=name, dataset=ds, solver="EULER", steps=n, n=len(y), accuracy=float((pred == y).mean()),
                                   macro_f1=macro_f1(y, pred, len(labels)), wall_s=time.time() - t0,
                                   median_request_s=float(np.median(times)))
                        out["results"].append(row); print(row, flush=True)
            elif m.task == pb.EMBEDDING:
                for ds, (q, c) in sets["retrieval"].items():
                    if not ds.endswith("-de"):
                        continue
                    for n in steps:
                        embs, t0 = [], time.time()
                        for side in (q, c):
                            vecs = []
                            for chunk in batched(side, per):
                                r = stub.Embed(pb.EmbedRequest(model=name, inputs=chunk, normalize=True, truncate=True,
                                                               compute=pb.ComputeOptions(steps=n, solver=pb.EULER)), timeout=120)
                                vecs.extend(list(e.values) for e in r.embeddings)
                            embs.append(np.array(vecs, dtype=np.float32))
                        rk = recall_at_k(embs[0] @ embs[1].T, (1, 10))
                        row = dict(model=name, dataset=ds, solver="EULER", steps=n, n=len(q), **{"recall@1": rk[1], "recall@10": rk[10]},
                                   wall_s=time.time() - t0)
                        out["results"].append(row); print(row, flush=True)
    os.makedirs(os.path.join(MODELS, "work", "eval"), exist_ok=True)
    json.dump(out, open(a.out, "w"), indent=1)
    return 0
