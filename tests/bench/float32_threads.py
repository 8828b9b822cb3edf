#!/usr/bin/python3
"""Why float32 CPU calls split their rows (server --row_parallel), and why calls too small to
split hand their products to OpenBLAS's threads (--blas_parallel): one shared-block evaluation
of a bundled model over a --rows x --tokens batch (32 x 64 by default), float32, under each way
of using 2 cores.

  torch T / openblas B   one call, LibTorch intra-op threads T, OpenBLAS threads B
  row split              two calls over half the rows each at once (1 + 1 threads, OpenBLAS 1;
                         not run for a single row)

  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 tests/bench/float32_threads.py [--model DIR]
      [--rows R --tokens T]   e.g. --model models/repository/classify-sections --rows 1 --tokens 128

Each line is the mean of --calls evaluations after 3 unmeasured ones, in its own process (thread
counts are process-wide). Prints the OpenBLAS kernel family it ran. Then, one thread each, the
block's QKV product ([M, 192] x [576, 192]^T) through OpenBLAS (F.linear) and through oneDNN
(mkldnn_linear on a pre-converted weight): whether another float32 kernel would be the lever.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import time
import timeit
from concurrent.futures import ThreadPoolExecutor

import torch


def measure(model_dir, torch_threads, blas_threads, split, calls, rows, tokens):
    torch.set_num_threads(torch_threads)
    blas = ctypes.CDLL("libopenblas.so.0")
    blas.openblas_set_num_threads(blas_threads)
    blas.openblas_get_corename.restype = ctypes.c_char_p
    model = torch.jit.load(os.path.join(model_dir, "model.pt"))
    model.eval()
    model.prepare()
    torch.manual_seed(0)
    x = torch.randint(5, 8000, (rows, tokens))
    mask = torch.ones(rows, tokens)
    pool = ThreadPoolExecutor(1)

    def field(h):
        with torch.inference_mode():
            return model.vector_field(h, mask[: h.size(0)])

    def evaluate(h):
        if not split:
            return field(h)
        half = h.size(0) // 2
        other = pool.submit(field, h[half:])  # TorchScript calls release the GIL
        return torch.cat([field(h[:half]), other.result()])

    with torch.inference_mode():
        h = model.input_stage(x, mask)
        reference = field(h)
        for _ in range(3):
            evaluate(h)
        start = time.perf_counter()
        for _ in range(calls):
            out = evaluate(h)
        ms = (time.perf_counter() - start) / calls * 1e3
    label = "row split (1 + 1 threads)" if split else "torch %d / openblas %d" % (torch_threads, blas_threads)
    print("%-28s %6.1f ms per evaluation  (max diff vs one call %.1e, openblas core %s)" % (
        label, ms, (out - reference).abs().max().item(), blas.openblas_get_corename().decode()))


def kernels(calls):
    torch.set_num_threads(1)
    ctypes.CDLL("libopenblas.so.0").openblas_set_num_threads(1)

    def mean_us(fn):
        timeit.timeit(fn, number=20)  # warm-up
        return timeit.timeit(fn, number=calls) / calls * 1e6

    for rows in (32, 128, 1024):
        x, w, b = torch.randn(rows, 192), torch.randn(576, 192), torch.randn(576)
        w_onednn = w.to_mkldnn()
        with torch.inference_mode():
            blas = mean_us(lambda: torch.nn.functional.linear(x, w, b))
            onednn = mean_us(lambda: torch._C._nn.mkldnn_linear(x.to_mkldnn(), w_onednn, b).to_dense())
        print("QKV product, M = %4d: OpenBLAS %7.1f us (%.0f GFLOP/s), oneDNN %7.1f us" % (
            rows, blas, 2 * rows * 576 * 192 / blas / 1e3, onednn))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "..", "..", "models",
                                                    "repository", "embed-sharebert"))
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--one", nargs=3, type=int, help=argparse.SUPPRESS)  # torch, blas, split
    args = ap.parse_args()
    if args.one:
        measure(args.model, args.one[0], args.one[1], bool(args.one[2]), args.calls, args.rows, args.tokens)
        return
    ways = [(1, 1, 0), (2, 1, 0), (1, 2, 0), (2, 2, 0)] + ([(1, 1, 1)] if args.rows > 1 else [])
    for torch_threads, blas_threads, split in ways:
        subprocess.run([sys.executable, __file__, "--model", args.model, "--calls", str(args.calls),
                        "--rows", str(args.rows), "--tokens", str(args.tokens),
                        "--one", str(torch_threads), str(blas_threads), str(split)], check=True)
    kernels(20 * args.calls)


if __name__ == "__main__":
    main()
