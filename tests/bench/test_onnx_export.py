#!/usr/bin/python3
"""Parity of `python3 -m odeserve_models export-onnx` with TorchScript: each model folder is
exported at a fixed (solver, steps); ONNX Runtime in Node (tests/bench/ort/run.js) and the
TorchScript module in Python (input_stage, odeserve_models.solvers, output_stage: the server's
loop) run the same inputs, of other shapes than the export traced (padded rows included); the
largest absolute difference must stay under --tolerance (1e-4).

Models: the test repository's tiny-albert (plus tiny-eelbert's hashed features and tiny-probe's
classifier layout), the bundled embed-sharebert (prepare() materializes its matrices before
export), and an imported ALBERT (a synthetic Hugging Face checkpoint through import-albert).

  tests/bench/test_onnx_export.py --repository build/test-repository \
      --bundled models/repository/embed-sharebert [--node node] [--ort_dir tests/bench/ort]

Exits 77 (ctest SKIP_RETURN_CODE) with the reason when node or onnxruntime-node is missing
(install: npm ci --prefix tests/bench/ort).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "models")
sys.path.insert(0, MODELS)
SKIP = 77


def skip(reason):
    print("SKIP: " + reason, flush=True)
    sys.exit(SKIP)


def tensor_spec(t):
    kind = {"torch.int64": "int64", "torch.float32": "float32"}[str(t.dtype)]
    return {"type": kind, "dims": list(t.shape), "data": t.reshape(-1).tolist()}


def cases_for(summary, cfg, scripted):
    """Two inputs of other shapes than the trace's (batch 2): 3 rows at the longest length, the
    later rows padded, and 1 short row."""
    from odeserve_models import onnx_export
    longest = max(3, summary["max_tokens"])
    out = []
    for name, batch, length, seed in (("3x%d" % longest, 3, longest, 11), ("1x5", 1, 5, 12)):
        x, mask = onnx_export.example_inputs(cfg, scripted, batch=batch, length=length, seed=seed)
        out.append((name, x, mask))
    return out


def max_tokens_for(folder):
    """A model with an embedder window (EmbeddingProbeClassifier) exports one graph for the
    token counts up to the window (export-onnx refuses more); others for every count (0)."""
    import torch
    scripted = torch.jit.load(os.path.join(folder, "model.pt"), map_location="cpu")
    return int(scripted.window) if hasattr(scripted, "window") else 0


def imported_albert(tmp):
    """An imported ALBERT model folder (classification: embeddings, post-LN field, pooler and
    classifier head), or None with the reason where the import fails."""
    from odeserve_models.albert import synthetic
    ckpt = os.path.join(tmp, "albert-ckpt")
    synthetic.write_synthetic_checkpoint(ckpt, format="safetensors", task="classification", layers=3)
    out = os.path.join(tmp, "albert-classify")
    proc = subprocess.run([sys.executable, "-m", "odeserve_models", "import-albert", ckpt, out,
                           "--task", "classification"], cwd=MODELS, capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    if proc.returncode != 0:
        raise AssertionError("import-albert failed:\n" + proc.stdout + proc.stderr)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repository", required=True, help="the test model repository (build/test-repository)")
    ap.add_argument("--bundled", action="append", default=[],
                    help="a bundled model folder to check too (repeatable), e.g. models/repository/embed-sharebert")
    ap.add_argument("--node", default=shutil.which("node") or "", help="node binary")
    ap.add_argument("--ort_dir", default=os.path.join(ROOT, "tests", "bench", "ort"))
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--no_albert_import", action="store_true", help="skip the imported ALBERT")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (printed)")
    args = ap.parse_args()
    args.repository = os.path.abspath(args.repository)
    args.bundled = [os.path.abspath(b) for b in args.bundled]

    if not args.node or not os.path.exists(args.node):
        skip("node not found (Debian package nodejs, docker/install-deps.sh)")
    if not os.path.isdir(os.path.join(args.ort_dir, "node_modules", "onnxruntime-node")):
        where = os.path.abspath(args.ort_dir)
        if where.startswith(ROOT + os.sep):
            where = os.path.relpath(where, ROOT) + " (from the source root)"
        skip("onnxruntime-node is not installed: npm ci --prefix " + where)

    import torch
    from odeserve_models import onnx_export, solvers
    torch.set_num_threads(1)  # the check is small; a second thread only contends on a busy machine
    torch.set_grad_enabled(False)

    tmp = tempfile.mkdtemp(prefix="odeserve-onnx-parity-")
    # (label, model folder, steps (0 = L), solver)
    plan = [("tiny-albert", os.path.join(args.repository, "tiny-albert"), 0, "euler"),
            ("tiny-albert", os.path.join(args.repository, "tiny-albert"), 3, "euler"),
            ("tiny-albert", os.path.join(args.repository, "tiny-albert"), 2, "heun"),
            ("tiny-eelbert", os.path.join(args.repository, "tiny-eelbert"), 0, "euler"),
            ("tiny-probe", os.path.join(args.repository, "tiny-probe"), 0, "euler")]
    for folder in args.bundled:
        name = os.path.basename(os.path.normpath(folder))
        plan += [(name, folder, 0, "euler"), (name, folder, 3, "euler")]
    if not args.no_albert_import:
        folder = imported_albert(tmp)
        plan += [("imported-albert", folder, 0, "euler"), ("imported-albert", folder, 5, "euler")]

    failures, rows = [], []
    try:
        for i, (label, folder, steps, solver) in enumerate(plan):
            onnx_path = os.path.join(tmp, "%d-%s.onnx" % (i, label))
            t0 = time.time()
            max_tokens = max_tokens_for(folder)
            if i == 0:  # the CLI once (the command registered in odeserve_models/__main__.py)
                proc = subprocess.run([sys.executable, "-m", "odeserve_models", "export-onnx", folder, onnx_path]
                                      + (["--steps", str(steps)] if steps else []) + ["--solver", solver]
                                      + (["--max_tokens", str(max_tokens)] if max_tokens else []),
                                      cwd=MODELS, capture_output=True, text=True,
                                      env=dict(os.environ, OMP_NUM_THREADS="1"))
                if proc.returncode != 0:
                    raise AssertionError("export-onnx failed:\n" + proc.stdout + proc.stderr)
                summary = json.loads(proc.stdout.strip().splitlines()[-1])
            else:
                summary = onnx_export.export(folder, onnx_path, steps, solver, max_tokens=max_tokens)
            export_s = time.time() - t0
            cfg = onnx_export.read_config(folder)
            cfg["model_dir"] = folder
            scripted = torch.jit.load(os.path.join(folder, cfg["torchscript_file"]), map_location="cpu")
            scripted.eval()
            scripted.prepare()
            cases = cases_for(summary, cfg, scripted)
            inputs = {"cases": [{"name": n, "feeds": {summary["input"]: tensor_spec(x), "mask": tensor_spec(m)}}
                                for n, x, m in cases]}
            in_path, out_path = onnx_path + ".in.json", onnx_path + ".out.json"
            with open(in_path, "w") as f:
                json.dump(inputs, f)
            proc = subprocess.run([args.node, os.path.join(args.ort_dir, "run.js"), "--model", onnx_path,
                                   "--inputs", in_path, "--output", out_path, "--threads", "1"],
                                  capture_output=True, text=True)
            if proc.returncode == 3:
                skip("onnxruntime-node does not load: " + proc.stderr.strip())
            if proc.returncode != 0:
                raise AssertionError("run.js failed:\n" + proc.stdout + proc.stderr)
            ort_version = json.loads(proc.stdout.splitlines()[0])["ort"]
            with open(out_path) as f:
                got = {c["name"]: c["outputs"][summary["output"]] for c in json.load(f)["cases"]}
            for n, x, m in cases:
                want = solvers.run(scripted, x, m, summary["steps"], summary["solver"])
                out = got[n]
                if list(want.shape) != out["dims"]:
                    failures.append("%s %s: ORT output %s, TorchScript %s" % (label, n, out["dims"], list(want.shape)))
                    continue
                diff = float((want - torch.tensor(out["data"]).reshape(want.shape)).abs().max())
                scale = float(want.abs().max())
                ok = diff < args.tolerance
                rows.append((label, summary["solver"].lower(), summary["steps"], summary["trained_depth"], n,
                             list(want.shape), diff, scale, export_s, "ok" if ok else "FAIL"))
                if not ok:
                    failures.append("%s %s steps %d %s: max |ORT - TorchScript| = %.3g >= %g"
                                    % (label, summary["solver"], summary["steps"], n, diff, args.tolerance))
        print("onnxruntime-node %s, tolerance %g" % (ort_version, args.tolerance))
        print("%-18s %-6s %5s %3s %-8s %-10s %11s %9s %8s" % ("model", "solver", "steps", "L", "input",
                                                              "output", "max|diff|", "max|out|", "export"))
        for r in rows:
            print("%-18s %-6s %5d %3d %-8s %-10s %11.3g %9.3g %7.1fs %s" % (
                r[0], r[1], r[2], r[3], r[4], "x".join(map(str, r[5])), r[6], r[7], r[8], r[9]))
    finally:
        if args.keep:
            print("kept:", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("PASS: %d comparisons" % len(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
