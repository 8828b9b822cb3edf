#!/usr/bin/env python3
"""Served path vs Python path, output by output: every READY model of a running server is called
with a few texts (ASCII, umlauts, CJK, emoji) at several (solver, steps) and compared with the
Python mirror (odeserve_models.solvers) on the same model folder.

  /usr/bin/python3 models/check_served_parity.py --address localhost:50051 --repository models/repository
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import grpc  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import eval_served  # noqa: E402
from odeserve_models.solvers import run  # noqa: E402
from odeserve_models.verify import load_model_dir  # noqa: E402

TEXTS = ["Python library for XML parsing", "Spiel mit Raumschiffen und Außerirdischen",
         "bibliothèque de développement — 中文 😀", "x"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", default="localhost:50051")
    ap.add_argument("--repository", default=os.path.join(HERE, "repository"))
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    _, pb, pbg = eval_served.stubs()
    s = pbg.InferenceStub(grpc.insecure_channel(a.address))
    worst = 0.0
    for info in s.ListModels(pb.ListModelsRequest(), timeout=10).models:
        if info.state != pb.READY:
            print(info.name, "not ready:", info.error); continue
        cfg, tok, m = load_model_dir(os.path.join(a.repository, info.name))
        L = cfg["trained_depth"]
        for n, solver in ((L, "EULER"), (1, "EULER"), (max(1, L // 2), "HEUN"), (1, "RK4")):
            co = pb.ComputeOptions(steps=n, solver=pb.Solver.Value(solver))
            with torch.no_grad():
                py = np.concatenate([run(m, *tok.batch([t]), n, solver).numpy() for t in TEXTS])
            if info.task == pb.EMBEDDING:
                r = s.Embed(pb.EmbedRequest(model=info.name, inputs=TEXTS, compute=co), timeout=30)
                srv = np.array([list(e.values) for e in r.embeddings])
            else:
                r = s.Classify(pb.ClassifyRequest(model=info.name, inputs=TEXTS, compute=co, top_k=len(cfg["labels"])), timeout=30)
                srv = np.array([[dict((l.label, l.score) for l in res.labels)[lab] for lab in cfg["labels"]] for res in r.results])
                py = torch.softmax(torch.from_numpy(py), -1).numpy()
            d = float(np.abs(srv - py).max())
            worst = max(worst, d)
            print("%-20s %-5s n=%-2d max |served - python| = %.3g" % (info.name, solver, n, d))
    print("worst", worst)
    sys.exit(0 if worst <= a.tol else 1)


if __name__ == "__main__":
    main()
