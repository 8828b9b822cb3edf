#!/usr/bin/python3
"""odeserve against ONNX Runtime on the same weights, in one run, one table (issue "Performance at
the compute limit"). Read ratios inside one run: the machine is shared and noisy.

  tests/bench/side_by_side.py --build build --model_dir models/repository/embed-sharebert

1. Runtime, one batch without RPC: odeserve_runtime_bench's BM_Batch (float32, Euler) against
   ONNX Runtime (onnxruntime-node, CPU, --threads intra-op threads, tests/bench/ort/run.js) on the
   model exported by `python3 -m odeserve_models export-onnx` at the same step count, on the
   same token ids (the benchmark's own text, tokenized as the server does): 1x32, 1x64 and 32x64
   at L steps, and 1x64 and 32x64 at the benchmark's one-step rows (L_over:8, max(1, L/8) steps).
   A shape that runtime_bench.cc does not register (1x64 at L, as of this writing) says so.
2. Served, gRPC, 64-token inputs, steps = L, float32 (the repository copy's compute_precision is
   set to FLOAT32 unless --served_precision config): one caller's p50 latency
   (odeserve-bench --concurrency 1) against ORT's 1x64 batch (no RPC, no tokenization: a floor),
   and 32 callers' rows/s (--concurrency 32) against ORT's 32x64 batch and against the Python peer
   (tests/bench/python_peer.py: grpcio + PyTorch, same module and solver loop, 2 ms batcher) under
   the same load.

Prints the table; writes every figure to --out/side_by_side.json (and the bench reports, server
logs and ONNX files under --out). Needs `npm ci --prefix tests/bench/ort`.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "models"))
sys.path.insert(0, os.path.join(ROOT, "client", "bench"))

# runtime_bench.cc's Row(): a row of exactly `length` tokens of this text.
ROW_TEXT = "command line utility for converting and compressing image files with python bindings "
SERVED_TOKENS = 64
# (rows, tokens, L_over): the shapes compared one batch at a time (steps = max(1, L / L_over))
RUNTIME_SHAPES = [(1, 32, 1), (1, 64, 1), (32, 64, 1), (1, 64, 8), (32, 64, 8)]


def log(*args):
    print(time.strftime("%H:%M:%S"), *args, file=sys.stderr, flush=True)


def row_ids(tok, length):
    """The ids runtime_bench.cc's Row(length) encodes: bos + pieces + eos, cut to `length`."""
    tok.max_len = length
    text = ROW_TEXT
    while len(text) < length * 10:
        text += ROW_TEXT
    ids = tok.ids(text)
    assert len(ids) == length, (len(ids), length)
    return ids


def feeds(ids, rows):
    T = len(ids)
    return {"ids": {"type": "int64", "dims": [rows, T], "data": ids * rows},
            "mask": {"type": "float32", "dims": [rows, T], "data": [1.0] * (rows * T)}}


def ort_bench(args, onnx_path, cases, name):
    in_path = os.path.join(args.out, name + ".in.json")
    with open(in_path, "w") as f:
        json.dump({"cases": cases}, f)
    cmd = [args.node, os.path.join(args.ort_dir, "run.js"), "--model", onnx_path, "--inputs", in_path, "--bench",
           "--threads", str(args.threads), "--min_time", str(args.min_time), "--warmup", "5"]
    if args.ort_no_spin:
        cmd.append("--no_spin")
    log("ort:", " ".join(cmd[2:]))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit("run.js failed (%d): %s%s" % (proc.returncode, proc.stdout, proc.stderr))
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return lines[0], {line["case"]: line for line in lines[1:]}


def runtime_bench(args, depth):
    """{(rows, tokens, L_over): {"ms", "name", "label"}} for the registered shapes, the missing
    ones, and the benchmark's context (threading)."""
    binary = os.path.join(args.build, "tests", "bench", "odeserve_runtime_bench")
    listed = subprocess.run([binary, "--benchmark_list_tests"], capture_output=True, text=True, check=True).stdout
    wanted, missing = [], []
    for rows, tokens, over in RUNTIME_SHAPES:
        pattern = re.compile(r"^BM_Batch/rows:%d/tokens:%d/L_over:%d/solver:\d+/bf16:0/" % (rows, tokens, over), re.M)
        (wanted if pattern.search(listed) else missing).append((rows, tokens, over))
    alternatives = "|".join("rows:%d/tokens:%d/L_over:%d" % s for s in wanted)
    out_path = os.path.join(args.out, "runtime_bench.json")
    cmd = [binary, "--model_dir=" + args.model_dir, "--intra_op_threads=%d" % args.threads,
           "--benchmark_filter=^BM_Batch/(%s)/solver:[0-9]+/bf16:0/" % alternatives,
           "--benchmark_out=" + out_path, "--benchmark_out_format=json"] + args.runtime_flag
    log("runtime:", " ".join(cmd[1:]))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out_path) as f:
        report = json.load(f)
    results = {}
    for b in report["benchmarks"]:
        m = re.match(r"BM_Batch/rows:(\d+)/tokens:(\d+)/L_over:(\d+)/", b["name"])
        key = tuple(int(g) for g in m.groups())
        if not b.get("label", "").lower().startswith("euler") or b.get("error_occurred"):
            continue
        ms = b["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
        results.setdefault(key, []).append({"ms": ms, "name": b["name"], "label": b.get("label", ""),
                                            "iterations": b["iterations"]})
    # a shape registered twice (1x32 at L is) ran twice: keep the faster, as the machine allowed
    results = {k: min(v, key=lambda r: r["ms"]) for k, v in results.items()}
    return results, missing, report.get("context", {})


def served_repository(args, cfg):
    """A repository holding a copy of the model alone, with max_sequence_length = 64 (so the
    bench's long lines are cut to 64 tokens) and, by default, compute_precision FLOAT32."""
    repo = os.path.join(args.out, "repository")
    shutil.rmtree(repo, ignore_errors=True)
    dest = os.path.join(repo, cfg["name"])
    shutil.copytree(args.model_dir, dest)
    path = os.path.join(dest, "config.pbtxt")
    text = open(path).read()
    text = re.sub(r"^max_sequence_length:.*$", "max_sequence_length: %d" % SERVED_TOKENS, text, flags=re.M)
    if args.served_precision == "float32":
        text = re.sub(r"^compute_precision:.*\n", "", text, flags=re.M) + "compute_precision: FLOAT32\n"
    with open(path, "w") as f:
        f.write(text)
    return repo, dest


def load(args, address, name, concurrency, steps, inputs):
    json_path = os.path.join(args.out, name + ".json")
    cmd = [os.path.join(args.build, "client", "odeserve-bench"), "--address", address, "--method", "embed",
           "--model", args.model_name, "--inputs_file", inputs, "--concurrency", str(concurrency),
           "--steps", str(steps), "--duration", args.duration, "--warmup", args.warmup, "--progress=false",
           "--json_out", json_path, "--connect_timeout", "120s"]
    log("load:", name, "concurrency", concurrency)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(json_path) as f:
        report = json.load(f)
    overall = report["overall"]
    return {"p50_ms": overall["latency_ms"]["p50"], "p99_ms": overall["latency_ms"]["p99"],
            "rows_per_s": report["throughput_rps"], "errors": overall.get("errors")}


def start_peer(args, model_dir):
    port_file = os.path.join(args.out, "python_peer.ports")
    if os.path.exists(port_file):
        os.remove(port_file)
    log_file = open(os.path.join(args.out, "python_peer.log"), "w")
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "python_peer.py"), "--model_dir", model_dir,
                             "--port", "0", "--port_file", port_file, "--threads", str(args.threads)],
                            stdout=log_file, stderr=subprocess.STDOUT)
    for _ in range(1200):
        if os.path.exists(port_file):
            return proc, "127.0.0.1:%s" % re.search(r"grpc_port=(\d+)", open(port_file).read()).group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    sys.exit("python_peer did not start: " + open(os.path.join(args.out, "python_peer.log")).read()[-2000:])


def ratio_words(odeserve, other, higher_is_better):
    """"1.80x slower" / "1.25x faster" for odeserve against `other`."""
    if not odeserve or not other:
        return "-"
    r = odeserve / other
    faster = r > 1 if higher_is_better else r < 1
    x = r if r >= 1 else 1 / r
    return "%.2fx %s" % (x, "faster" if faster else "slower")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model_dir", default=os.path.join(ROOT, "models", "repository", "embed-sharebert"))
    ap.add_argument("--ort_dir", default=os.path.join(HERE, "ort"))
    ap.add_argument("--node", default=shutil.which("node") or "node")
    ap.add_argument("--threads", type=int, default=2, help="ORT intra-op threads, odeserve_runtime_bench and peer threads")
    ap.add_argument("--min_time", type=float, default=2.0, help="ORT: seconds per shape (runtime_bench: its own MinTime)")
    ap.add_argument("--duration", default="10s", help="served loads: measured time per load")
    ap.add_argument("--warmup", default="3s", help="served loads: warm-up per load")
    ap.add_argument("--served_precision", choices=["float32", "config"], default="float32",
                    help="float32: the served copy runs FLOAT32 like ORT and BM_Batch bf16:0; config: as configured")
    ap.add_argument("--server_flag", action="append", default=[], help="extra odeserve flag (repeatable)")
    ap.add_argument("--runtime_flag", action="append", default=[],
                    help="extra odeserve_runtime_bench flag (repeatable), e.g. --runtime_flag=--parallel_min_tokens=0")
    ap.add_argument("--ort_no_spin", action="store_true", help="ORT intra-op threads do not spin-wait")
    ap.add_argument("--skip", default="", help="comma list of parts to leave out: runtime, served, peer")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: ORT 0.3 s per shape, loads 2 s + 1 s warm-up (figures meaningless)")
    ap.add_argument("--out", default="", help="work folder (default: a new temporary one, kept)")
    args = ap.parse_args()
    if args.quick:
        args.min_time, args.duration, args.warmup = 0.3, "2s", "1s"
    skip = set(filter(None, args.skip.split(",")))
    args.model_dir = os.path.abspath(args.model_dir)
    args.out = os.path.abspath(args.out or tempfile.mkdtemp(prefix="odeserve-side-by-side-"))
    os.makedirs(args.out, exist_ok=True)
    if not os.path.isdir(os.path.join(args.ort_dir, "node_modules", "onnxruntime-node")):
        sys.exit("onnxruntime-node is not installed: npm ci --prefix %s" % args.ort_dir)

    import torch
    from odeserve_models import onnx_export, text
    torch.set_num_threads(1)
    cfg = onnx_export.read_config(args.model_dir)
    args.model_name = cfg["name"]
    if cfg["input_kind"] != "TOKEN_IDS":
        sys.exit("side_by_side.py compares TOKEN_IDS models (hashed-feature inputs are not built here)")
    depth = cfg["trained_depth"]
    tok = text.Tokenizer(os.path.join(args.model_dir, cfg["tokenizer_file"]), SERVED_TOKENS)
    ids = {T: row_ids(tok, T) for T in sorted({t for _, t, _ in RUNTIME_SHAPES})}

    # ONNX graphs, one per step count, valid up to 64 tokens
    onnx = {}
    for over in sorted({o for _, _, o in RUNTIME_SHAPES}):
        steps = max(1, depth // over)
        path = os.path.join(args.out, "%s-euler-%d.onnx" % (cfg["name"], steps))
        log("export-onnx: %d steps -> %s" % (steps, path))
        onnx[over] = onnx_export.export(args.model_dir, path, steps, "euler", max_tokens=max(ids))
    ort_info, ort = {}, {}
    for over, summary in onnx.items():
        cases = [{"name": "%dx%d" % (r, t), "feeds": feeds(ids[t], r)} for r, t, o in RUNTIME_SHAPES if o == over]
        ort_info, ort[over] = ort_bench(args, summary["onnx"], cases, "ort-L_over-%d" % over)

    runtime, missing, context = ({}, [], {}) if "runtime" in skip else runtime_bench(args, depth)

    served = {}
    if "served" not in skip or "peer" not in skip:
        repo, model_copy = served_repository(args, cfg)
        inputs = os.path.join(args.out, "inputs-64-tokens.txt")
        line = ROW_TEXT * 8
        assert len(tok.sp.encode(line)) + 2 > SERVED_TOKENS  # truncated to exactly 64 by the server
        with open(inputs, "w") as f:
            f.write((line.strip() + "\n") * 16)
        if "served" not in skip:
            import budget_benchmarks as bb
            server = bb.Server(os.path.join(args.build, "server", "odeserve"), repo, args.out, "odeserve",
                               args.server_flag)
            try:
                served["odeserve"] = {c: load(args, server.address, "odeserve-c%d" % c, c, depth, inputs) for c in (1, 32)}
            finally:
                server.stop()
        if "peer" not in skip:
            proc, address = start_peer(args, model_copy)
            try:
                served["python_peer"] = {c: load(args, address, "peer-c%d" % c, c, depth, inputs) for c in (1, 32)}
            finally:
                proc.terminate()
                proc.wait(30)

    # ---- the table ------------------------------------------------------------------------------
    lines = []
    say = lines.append
    say("side by side: %s (L=%d), float32 Euler; ONNX Runtime %s (Node, %d intra-op threads%s); opset %d"
        % (cfg["name"], depth, ort_info.get("ort"), args.threads, "" if not args.ort_no_spin else ", no spinning",
           onnx[1]["opset"]))
    if context:
        say("odeserve_runtime_bench: %s; %s" % (context.get("threading", "?"), context.get("allocator", "?")))
    if args.quick:
        say("QUICK SMOKE RUN: ORT %.1f s per shape, loads %s: the figures are noise, not results" % (args.min_time, args.duration))
    say("")
    say("%-38s %12s %12s %13s %16s %12s" % ("runtime: one batch, no RPC (means)", "odeserve ms", "ORT ms",
                                            "odeserve/ORT", "odeserve is", "ORT p50 ms"))
    figures = {"runtime": [], "served": {}}
    for rows, tokens, over in RUNTIME_SHAPES:
        steps = max(1, depth // over)
        label = "  %dx%d, %d Euler step%s%s" % (rows, tokens, steps, "s" if steps > 1 else "",
                                                " (L)" if over == 1 else " (L/%d)" % over if steps > 1 else "")
        o = ort[over]["%dx%d" % (rows, tokens)]
        r = runtime.get((rows, tokens, over))
        entry = {"rows": rows, "tokens": tokens, "steps": steps, "ort_ms": o["mean_ms"], "ort_p50_ms": o["p50_ms"],
                 "odeserve_ms": r["ms"] if r else None, "odeserve_benchmark": r["name"] if r else None}
        figures["runtime"].append(entry)
        if r:
            say("%-38s %12.2f %12.2f %13.2f %16s %12.2f" % (label, r["ms"], o["mean_ms"], r["ms"] / o["mean_ms"],
                                                            ratio_words(r["ms"], o["mean_ms"], False), o["p50_ms"]))
        else:
            why = "not registered" if (rows, tokens, over) in missing else "skipped"
            say("%-38s %12s %12.2f %13s %16s %12.2f" % (label, "-", o["mean_ms"], "-", why, o["p50_ms"]))
    if missing:
        say("  (not registered: %s; add e.g. ->Args({1, 64, 1, kEuler, 0}) to BM_Batch in tests/bench/runtime_bench.cc)"
            % ", ".join("%dx%d L_over:%d" % s for s in missing))
    if served:
        ort_1 = ort[1]["1x%d" % SERVED_TOKENS]
        ort_32 = ort[1]["32x%d" % SERVED_TOKENS]
        peer = served.get("python_peer", {})
        ode = served.get("odeserve", {})
        say("")
        say("served: gRPC, %d-token inputs, %d steps (L), %s" % (
            SERVED_TOKENS, depth, "FLOAT32" if args.served_precision == "float32" else "config precision"))
        say("%-38s %12s %12s %13s %16s %12s %14s" % ("", "odeserve", "ORT (no RPC)", "odeserve/ORT", "odeserve is",
                                                    "python peer", "odeserve/peer"))

        def row(label, key, ort_value, higher_is_better, fmt):
            o = ode.get(key, {}).get("rows_per_s" if higher_is_better else "p50_ms")
            p = peer.get(key, {}).get("rows_per_s" if higher_is_better else "p50_ms")
            say("%-38s %12s %12s %13s %16s %12s %14s" % (
                label, fmt % o if o else "-", fmt % ort_value, "%.2f" % (o / ort_value) if o else "-",
                ratio_words(o, ort_value, higher_is_better), fmt % p if p else "-",
                "%.2f (%s)" % (o / p, ratio_words(o, p, higher_is_better).split()[1]) if o and p else "-"))
        row("  1 caller: p50 ms (ORT: 1x64 p50)", 1, ort_1["p50_ms"], False, "%.2f")
        row("  32 callers: rows/s (ORT: 32x64)", 32, ort_32["rows_per_s"], True, "%.1f")
        for who, by in served.items():
            for c, r in by.items():
                if r.get("errors"):
                    say("  %s at concurrency %d had errors: %s" % (who, c, json.dumps(r["errors"])))
        figures["served"] = {"odeserve": ode, "python_peer": peer, "ort_1x64": ort_1, "ort_32x64": ort_32}
    figures.update({"ort": ort_info, "runtime_context": context, "onnx": onnx, "quick": args.quick,
                    "threads": args.threads, "served_precision": args.served_precision})
    print("\n".join(lines))
    with open(os.path.join(args.out, "side_by_side.json"), "w") as f:
        json.dump(figures, f, indent=1, sort_keys=True, default=str)
    with open(os.path.join(args.out, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    log("reports in", args.out)


if __name__ == "__main__":
    main()
