#!/usr/bin/env python3
"""Seconds per training step of the 128-token classifier's shape with and without bf16 autocast,
alternating, one thread: the figure behind train's --amp default (models/README.md).

  PYTHONPATH=models /usr/bin/python3 -m experiments.bench_autocast [--rounds 2] [--calls 3]
"""
import argparse
import time

import torch

from odeserve_models import families
from odeserve_models.cpu import native_bfloat16
from odeserve_models.mlm import integrate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    # classify-sections' sizes; a batch as train --objective classify draws it (64 + 2 x 12 rows)
    model = families.build("sharebert", vocab=8000, emb=96, hidden=192, heads=4, ffn=768, trained_depth=8,
                           max_len=128, out_dim=192)
    x = torch.randint(4, 8000, (88, 100))
    mask = torch.ones(88, 100)
    print("native bfloat16:", native_bfloat16())
    for r in range(a.rounds):
        for amp in (False, True):
            t0 = time.time()
            for _ in range(a.calls):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                    pooled = model.pool(integrate(model, x, mask, a.steps), mask)
                pooled.float().sum().backward()
            print("round %d  autocast %-5s %.2f s/step" % (r + 1, amp, (time.time() - t0) / a.calls), flush=True)


if __name__ == "__main__":
    main()
