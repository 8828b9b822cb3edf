"""Served path vs Python path, output by output: every READY model of a running server is called
with a few texts (ASCII, umlauts, CJK, emoji) at several (solver, steps) and compared with the
Python mirror (odeserve_models.solvers) on the same model folder.

  PYTHONPATH=models /usr/bin/python3 -m odeserve_models check-served-parity --address localhost:50051 --repository models/repository
  # or start a server on the repository (and stop it afterwards)
  PYTHONPATH=models /usr/bin/python3 -m odeserve_models check-served-parity --start build/server/odeserve --repository R
Parity is float32 parity: run it on a repository whose models are compute_precision FLOAT32.
"""
import os

import numpy as np
import torch

from odeserve_models.cli import parser
from odeserve_models.paths import MODELS
from odeserve_models.served import Served
from odeserve_models.solvers import run
from odeserve_models.verify import load_model_dir

TEXTS = ["Python library for XML parsing", "Spiel mit Raumschiffen und Außerirdischen",
         "bibliothèque de développement — 中文 😀", "x"]


def check(pb, s, infos, repository):
    """Max |served - Python| over every READY model at four (steps, solver) settings."""
    worst = 0.0
    for info in infos:
        if info.state != pb.READY:
            print(info.name, "not ready:", info.error); continue
        cfg, tok, m = load_model_dir(os.path.join(repository, info.name))
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
    return worst


def main(argv=None) -> int:
    ap = parser("check-served-parity", __doc__)
    ap.add_argument("--address", default="")
    ap.add_argument("--start", default="", help="server binary to start on --repository")
    ap.add_argument("--grpc_port", type=int, default=50074)
    ap.add_argument("--repository", default=os.path.join(MODELS, "repository"))
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args(argv)
    with Served(a.address, a.start, a.repository, a.grpc_port, -1) as served:
        worst = check(served.pb, served.stub, served.models.values(), a.repository)
    print("worst", worst)
    return 0 if worst <= a.tol else 1
