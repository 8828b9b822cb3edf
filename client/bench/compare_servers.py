#!/usr/bin/python3
"""Runs one odeserve-bench load against server variants, one after another, and prints a line
per variant: for tuning flags and batching settings on a given machine.

A variant is a name plus odeserve flags, environment variables ("env"), edits of --model's
config.pbtxt (applied to a copy of the repository) and/or another server binary ("binary", to
compare two commits: build the other one in its own worktree and build folder). Every variant sees the same load
and arrivals (same seed). --interleave keeps every variant's server up and runs them in turn,
round after round, so that a slow spell of a noisy machine falls on all of them alike.

  compare_servers.py --variants '[{"name": "all-threads", "flags": ["--parallel_min_tokens", "0"]},
                                  {"name": "default"}]' --concurrency 1 --steps 8
  compare_servers.py --variants '[{"name": "joins"},
                                  {"name": "no-joins", "config": ["continuous_batching: false"]}]'
                     --rate 240 --budgets 9ms,18ms,36ms,72ms

"config" lines ("field: value") replace the config's first line setting that field, or else are
added at the top of its `batching { }` block (batching fields) or at the top level (others, such
as quality_tolerance). Reports (JSON + SVG) land in --out; the printed
lines are also written to --out/summary.txt.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import budget_benchmarks as bb  # noqa: E402  (Server, Bench, repository_copy)


# BatchingConfig's fields (proto/odeserve/v1/model_config.proto): a line setting one of them that
# the config lacks goes into its batching block; any other goes at the top level.
BATCHING_FIELDS = {"max_batch_size", "max_batch_tokens", "max_queue_delay_us", "max_queue_size",
                   "pad_to_multiple", "continuous_batching", "queue_delay_when_idle"}


def edit_config(text, lines):
    """`text` with each "field: value" line set: replacing the field's first line, else added to
    the top of the batching block (batching fields) or at the end (top-level fields)."""
    for line in lines:
        field = line.split(":", 1)[0].strip()
        pattern = re.compile(r"^(\s*)%s\s*:.*$" % re.escape(field), re.MULTILINE)
        if pattern.search(text):
            text = pattern.sub(lambda m: m.group(1) + line, text, count=1)
        elif field in BATCHING_FIELDS:
            text = text.replace("batching {", "batching {\n  " + line, 1)
        else:
            text = text.rstrip("\n") + "\n" + line + "\n"
    return text


def number(value, spec, scale=1):
    """`value` formatted, or "-" where the report has null (no OK call, no report in a class)."""
    return "-" if value is None else spec % (scale * value)


def describe(name, report):
    overall = report["overall"]
    line = "%s: %s req/s, p50 %s ms, p99 %s ms" % (
        name, number(report["throughput_rps"], "%.1f"), number(overall["latency_ms"]["p50"], "%.2f"),
        number(overall["latency_ms"]["p99"], "%.2f"))
    if "client_hit_rate" in overall and report.get("classes"):
        line += ", within budget %s%%" % number(overall["client_hit_rate"], "%.2f", 100)
        for c in report["classes"]:
            line += " | %s: %s%%, %s steps (%s evaluations), p99 %s ms, server queue %s + compute %s ms" % (
                c["label"], number(c["client_hit_rate"], "%.2f", 100), number(c["steps"]["mean"], "%.2f"),
                number(c["field_evaluations"]["mean"], "%.2f"),
                number(c["latency_ms"]["p99"], "%.1f"), number(c["server_ms"]["queue_mean"], "%.1f"),
                number(c["server_ms"]["compute_mean"], "%.1f"))
    if overall.get("errors"):
        line += " | errors " + json.dumps(overall["errors"])
    return line


def main():
    ap = argparse.ArgumentParser()
    bb.add_common_arguments(ap)
    ap.add_argument("--variants", required=True, help="JSON list of {name, flags?, env?, config?, binary?}")
    ap.add_argument("--rate", type=float, default=0, help="open loop at this rate (else closed loop)")
    ap.add_argument("--concurrency", type=int, default=1, help="closed loop: calls in flight")
    ap.add_argument("--budgets", default="", help="budget mix, e.g. 9ms,18ms")
    ap.add_argument("--steps", type=int, default=0, help="request this many steps (0: the server chooses)")
    ap.add_argument("--duration", default="10s")
    ap.add_argument("--repeat", type=int, default=1, help="runs per variant (same server)")
    ap.add_argument("--interleave", action="store_true",
                    help="all servers up at once; run #1 of every variant, then #2, ...")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    bench = bb.Bench(args, args.out)
    load = ["--rate", "%.2f" % args.rate] if args.rate > 0 else ["--concurrency", str(args.concurrency)]
    load += ["--duration", args.duration, "--warmup", "3s"]
    if args.budgets:
        load += ["--budgets", args.budgets]
    if args.steps:
        load += ["--steps", str(args.steps)]
    lines = []

    def start(variant):
        repo = args.repository
        if variant.get("config"):
            repo = bb.repository_copy(args.repository, args.out, "repo-" + variant["name"], args.model,
                                      lambda text: edit_config(text, variant["config"]))
        env = {key: str(value) for key, value in variant.get("env", {}).items()}
        binary = variant.get("binary", os.path.join(args.build, "server", "odeserve"))
        return bb.Server(binary, repo, args.out, variant["name"], variant.get("flags", []), env)

    def measure(variant, server, run):
        label = variant["name"] if args.repeat == 1 else "%s#%d" % (variant["name"], run + 1)
        lines.append(describe(label, bench.run(label, server, load)))
        print(lines[-1], flush=True)

    variants = json.loads(args.variants)
    names = [variant["name"] for variant in variants]
    if len(set(names)) != len(names):
        sys.exit("variant names must differ (each names its server's log and reports): %s" % names)
    if args.interleave:
        servers = []
        try:
            for variant in variants:
                servers.append(start(variant))
            for run in range(args.repeat):
                for variant, server in zip(variants, servers):
                    measure(variant, server, run)
        finally:
            for server in servers:
                try:
                    server.stop()
                except Exception:  # one stuck server must not leave the others running
                    server.proc.kill()
    else:
        for variant in variants:
            server = start(variant)
            for run in range(args.repeat):
                measure(variant, server, run)
            server.stop()
    with open(os.path.join(args.out, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
