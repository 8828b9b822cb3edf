#!/usr/bin/env python3
"""The metric names that deploy/ and docs/ use exist in a real scrape of the real server.

Starts the odeserve binary on free ports with the test model repository, makes calls that touch
every family (Embed, a budgeted Embed, a refused Embed, Classify, an unknown model), scrapes
/metrics, and checks:
  * every family of the metrics contract is declared with its type, histograms expose
    _bucket (with le="+Inf") / _sum / _count;
  * every odeserve_ name used by the alert rules, the prometheus-adapter rule, the HPAs, the
    Grafana dashboard and docs/DEPLOY.md's reference exists in the scrape;
  * `code` label values are gRPC status names (what the alert rules match on);
  * `promtool check metrics` accepts the exposition;
  * SIGTERM drains and exits 0.

  test_metrics_scrape.py --server BIN --repository DIR --root REPO [--promtool P] [--log F]
"""
from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import odeserve_testlib as t  # noqa: E402
from check_promql import referenced_metric_names  # noqa: E402

CONTRACT = {
    "odeserve_requests_total": "counter",
    "odeserve_request_duration_seconds": "histogram",
    "odeserve_queue_duration_seconds": "histogram",
    "odeserve_compute_duration_seconds": "histogram",
    "odeserve_solver_steps": "histogram",
    "odeserve_budget_requests_total": "counter",
    "odeserve_batch_size": "histogram",
    "odeserve_batch_tokens": "histogram",
    "odeserve_queue_depth": "gauge",
    "odeserve_requests_in_flight": "gauge",
    "odeserve_cost_model_relative_error": "histogram",
    "odeserve_input_tokens_total": "counter",
    "odeserve_model_info": "gauge",
    "odeserve_build_info": "gauge",
    "odeserve_model_load_seconds": "gauge",
}
GRPC_CODES = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
              "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
              "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
              "UNAUTHENTICATED"}

failures: list[str] = []


def check(cond: bool, msg: str) -> None:
    print(("ok   " if cond else "FAIL ") + msg, flush=True)
    if not cond:
        failures.append(msg)


def family_of(name: str, types: dict) -> str | None:
    if name in types:
        return name
    for suf in ("_bucket", "_sum", "_count"):
        if name.endswith(suf) and types.get(name[: -len(suf)]) == "histogram":
            return name[: -len(suf)]
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--repository", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--promtool", default="promtool")
    ap.add_argument("--log", default="odeserve-metrics-test.log")
    ap.add_argument("--start_timeout", type=float, default=240)
    a = ap.parse_args()
    root = pathlib.Path(a.root)

    with t.Server(a.server, a.repository, log_path=a.log) as srv:
        c = t.Client(srv.target)
        try:
            t0 = time.monotonic()
            t.wait_serving(c, t.INFERENCE, a.start_timeout, proc=srv.proc)
            print(f"server SERVING after {time.monotonic() - t0:.1f}s", flush=True)
            ex = t.exercise(c)
        except Exception as e:  # noqa: BLE001
            print("FAIL", e, "\n--- server log ---\n" + srv.log_tail())
            return 1
        check(ex["embed"] is not None, "the test repository has a READY embedding model")
        check(ex["classify"] is not None, "the test repository has a READY classification model")

        text = t.scrape(srv.metrics_url)
        types, samples = t.parse_exposition(text)
        names = {s[0] for s in samples}
        print(f"scrape: {len(types)} families, {len(samples)} samples, {len(text)} bytes")

        for fam, typ in CONTRACT.items():
            check(types.get(fam) == typ, f"{fam} declared as {typ} (got {types.get(fam)})")
            if typ == "histogram":
                for suf in ("_bucket", "_sum", "_count"):
                    check(fam + suf in names, f"{fam}{suf} has samples")
                check(any(s[0] == fam + "_bucket" and 'le="+Inf"' in s[1] for s in samples),
                      f"{fam}_bucket has le=\"+Inf\"")
            else:
                check(fam in names, f"{fam} has samples")
        extra = sorted(f for f in types if f.startswith("odeserve_") and f not in CONTRACT)
        if extra:
            print("note: families beyond the contract:", ", ".join(extra))

        for name, where in sorted(referenced_metric_names(root).items()):
            fam = family_of(name, types)
            check(name in names or (fam is not None and name == fam),
                  f"{name} (used in {', '.join(sorted(where))}) exists in the scrape")

        codes = {s[1] for s in samples if s[0] == "odeserve_requests_total"}
        code_values = set()
        for lab in codes:
            for part in lab.strip("{}").split(","):
                if part.startswith("code="):
                    code_values.add(part.split("=", 1)[1].strip('"'))
        check(code_values and code_values <= GRPC_CODES, f"code labels are gRPC status names: {sorted(code_values)}")
        check("OK" in code_values and "NOT_FOUND" in code_values, "OK and NOT_FOUND calls were counted")
        if ex["embed"]:
            refused = [s for s in samples if s[0] == "odeserve_budget_requests_total" and 'outcome="refused"' in s[1]
                       and f'model="{ex["embed"]["name"]}"' in s[1]]
            check(bool(refused) and refused[0][2] >= 1, "the refused budget call counted as outcome=refused")
            outcomes = {p.split("=", 1)[1].strip('"') for s in samples if s[0] == "odeserve_budget_requests_total"
                        for p in s[1].strip("{}").split(",") if p.startswith("outcome=")}
            check(outcomes <= {"met", "missed", "refused"}, f"budget outcomes {sorted(outcomes)} in met|missed|refused")
        loaded = {m["name"] for m in ex["models"] if m["state"] == t.STATE_READY}
        info = {s[1] for s in samples if s[0] == "odeserve_model_info"}
        check(all(any(f'model="{m}"' in i for i in info) for m in loaded),
              f"odeserve_model_info has a series per READY model ({len(info)} series)")
        check(sum(1 for s in samples if s[0] == "odeserve_build_info") == 1, "one odeserve_build_info series")

        r = subprocess.run([a.promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        check(r.returncode == 0, "promtool check metrics: " + (r.stdout + r.stderr).strip().replace("\n", "; ")[:400])

        t0 = time.monotonic()
        rc = srv.terminate(timeout=60)
        check(rc == 0, f"SIGTERM: exit code {rc} after {time.monotonic() - t0:.1f}s (want 0)")
        c.close()
        if failures:
            print("--- server log ---\n" + srv.log_tail())
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
