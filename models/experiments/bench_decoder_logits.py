#!/usr/bin/env python3
"""Time the translator's decoder_logits per position: float32 projection against the bfloat16
shortlist (exact_logit_candidates, docs/MODEL_CONTRACT.md), same weights, same thread settings
as the server (OpenBLAS 1 thread, 2 LibTorch threads).

  OPENBLAS_NUM_THREADS=1 PYTHONPATH=models /usr/bin/python3 -m experiments.bench_decoder_logits --model_dir models/repository/translate-en-de
"""
import argparse
import time

import torch


def per_call_ms(fn, calls):
    for _ in range(20):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model_dir", default="models/repository/translate-en-de")
    ap.add_argument("--rows", default="1,4,16,64")
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    torch.set_num_threads(2)
    model = torch.jit.load(a.model_dir + "/model.pt")
    model.prepare()
    if int(model.exact_logit_candidates) == 0 or model.projection_bf16.numel() == 0:
        raise SystemExit("%s was exported without the shortlist (--exact-logit-candidates 0)" % a.model_dir)
    shortlist = model.projection_bf16
    empty = torch.zeros(0, dtype=torch.bfloat16)
    torch.manual_seed(0)
    print("rows  float32 ms  shortlist ms  speed-up")
    with torch.inference_mode():
        for rows in (int(r) for r in a.rows.split(",")):
            g = torch.randn(rows, 1, int(model.hidden_size))
            model.projection_bf16 = empty  # float32 path
            exact = per_call_ms(lambda: model.decoder_logits(g), a.calls)
            model.projection_bf16 = shortlist
            fast = per_call_ms(lambda: model.decoder_logits(g), a.calls)
            print("%4d  %10.3f  %12.3f  %7.2fx" % (rows, exact, fast, exact / fast))


if __name__ == "__main__":
    main()
