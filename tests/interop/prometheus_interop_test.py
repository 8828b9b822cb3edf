#!/usr/bin/env python3
"""A real Prometheus scrapes a real odeserve; the answers come from Prometheus's HTTP API.

Starts the odeserve binary (free ports, test model repository) and Debian's `prometheus` with a
generated config (1 s scrape and rule evaluation, deploy/prometheus/rules.yml loaded as is),
makes calls, then asks /api/v1/query and checks that:
  * the target is up and odeserve_requests_total holds exactly the calls this test made, by
    model, method and code;
  * the request-duration histogram arrived (_count equals the request count, p50/p99 and the
    mean are finite and plausible);
  * the alerting and recording rules of deploy/prometheus/rules.yml load and evaluate without
    error, and the recording rules produce series;
  * every Grafana dashboard query and the prometheus-adapter query run without error
    (reported: how many return data).

  prometheus_interop_test.py --server BIN --repository DIR --root REPO [--prometheus BIN]
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

root_dir = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(root_dir / "tests" / "deploy"))
import odeserve_testlib as t  # noqa: E402
from check_promql import adapter_exprs, dashboard_exprs, substitute_grafana  # noqa: E402

failures: list[str] = []


def check(cond, msg: str) -> bool:
    print(("ok   " if cond else "FAIL ") + msg, flush=True)
    if not cond:
        failures.append(msg)
    return bool(cond)


class Prometheus:
    def __init__(self, binary: str, workdir: pathlib.Path, metrics_port: int, rules: pathlib.Path):
        self.port = t.free_ports(1)[0]
        self.workdir = workdir
        cfg = workdir / "prometheus.yml"
        shutil.copy(rules, workdir / "rules.yml")
        cfg.write_text(f"""\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: odeserve
    static_configs:
      - targets: ["127.0.0.1:{metrics_port}"]
        labels: {{namespace: interop}}
""")
        self.args = [binary, f"--config.file={cfg}", f"--storage.tsdb.path={workdir / 'data'}",
                     f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]
        self.log = open(workdir / "prometheus.log", "w")
        print("starting:", " ".join(self.args), flush=True)
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)

    def get(self, path: str, **params):
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read().decode()) if path.startswith("/api/") else r.read().decode()

    def query(self, expr: str):
        try:
            d = self.get("/api/v1/query", query=expr)
        except urllib.error.HTTPError as e:
            return {"status": "error", "error": e.read().decode()}
        return d

    def wait_ready(self, timeout=60):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}: {(self.workdir / 'prometheus.log').read_text()[-2000:]}")
            try:
                self.get("/-/ready")
                return
            except Exception:  # noqa: BLE001
                time.sleep(0.2)
        raise TimeoutError("prometheus not ready")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def first(v) -> float:
    return v[0][1] if v else float("nan")


def vector(resp) -> list[tuple[dict, float]]:
    if resp.get("status") != "success" or resp["data"]["resultType"] != "vector":
        return []
    return [(r["metric"], float(r["value"][1])) for r in resp["data"]["result"]]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--repository", required=True)
    ap.add_argument("--root", default=str(root_dir))
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "prometheus")
    ap.add_argument("--workdir")
    ap.add_argument("--start_timeout", type=float, default=240)
    a = ap.parse_args()
    root = pathlib.Path(a.root)
    if not shutil.which(a.prometheus) and not pathlib.Path(a.prometheus).exists():
        print(f"FAIL: no prometheus binary ({a.prometheus}); Debian package prometheus, docker/install-deps.sh")
        return 1
    work = pathlib.Path(a.workdir or tempfile.mkdtemp(prefix="odeserve-prom-"))
    work.mkdir(parents=True, exist_ok=True)

    with t.Server(a.server, a.repository, log_path=str(work / "odeserve.log")) as srv:
        c = t.Client(srv.target)
        prom = None
        try:
            t.wait_serving(c, t.INFERENCE, a.start_timeout, proc=srv.proc)
            prom = Prometheus(a.prometheus, work, srv.metrics_port, root / "deploy/prometheus/rules.yml")
            prom.wait_ready()
            # Service discovery hands targets to the scrape loop after up to ~5 s: wait for the
            # first scrape, so every call below lands between scrapes.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not vector(prom.query('up{job="odeserve"}')):
                time.sleep(0.3)

            # Calls, counted here by (model, method, code), spread over several scrapes.
            made: dict[tuple[str, str, str], int] = {}
            models = [m for m in c.list_models() if m["state"] == t.STATE_READY]
            emb = next(m for m in models if m["task"] == t.TASK_EMBEDDING)
            cls = next((m for m in models if m["task"] == t.TASK_CLASSIFICATION), None)
            calls = [("Embed", emb["name"], t.embed_request(emb["name"], ["prometheus sees this call"]))]
            calls.append(("Embed", emb["name"], t.embed_request(emb["name"], ["a budgeted call"], t.compute_options(budget_s=5.0))))
            calls.append(("Embed", emb["name"], t.embed_request(emb["name"], [])))  # INVALID_ARGUMENT
            if cls:
                calls.append(("Classify", cls["name"], t.classify_request(cls["name"], ["a library for parsing"], 2)))
            for _round in range(5):
                for method, model, req in calls:
                    code, _, _ = c.inference(method, req)
                    made[(model, method, code.name)] = made.get((model, method, code.name), 0) + 1
                time.sleep(1.0)
            print("calls made:", {f"{k[0]}/{k[1]}/{k[2]}": v for k, v in sorted(made.items())})

            # Wait until Prometheus has a scrape taken after the last call.
            want_total = sum(n for (m, meth, code), n in made.items())
            deadline = time.monotonic() + 30
            got = 0.0
            while time.monotonic() < deadline:
                v = vector(prom.query(f'sum(odeserve_requests_total{{job="odeserve",method=~"Embed|Classify"}})'))
                got = v[0][1] if v else 0.0
                if got >= want_total:
                    time.sleep(2.5)  # two more scrapes: rate() needs samples after the last call
                    break
                time.sleep(0.5)
            up = vector(prom.query('up{job="odeserve"}'))
            check(up and up[0][1] == 1.0, f"target up: {up}")

            series = vector(prom.query('odeserve_requests_total{job="odeserve",method=~"Embed|Classify"}'))
            seen = {(m["model"], m["method"], m["code"]): v for m, v in series if v > 0}
            check(seen == {k: float(v) for k, v in made.items()},
                  f"odeserve_requests_total via /api/v1/query == calls made: {sorted(seen.items())}")
            check(all(m.get("namespace") == "interop" and m.get("instance") for m, _ in series),
                  "series carry the target labels (job, instance, namespace)")

            cnt = vector(prom.query('sum(odeserve_request_duration_seconds_count{method=~"Embed|Classify"})'))
            check(cnt and cnt[0][1] == want_total,
                  f"odeserve_request_duration_seconds_count {first(cnt)} == requests {want_total}")
            for q in (0.5, 0.99):
                v = vector(prom.query(f'histogram_quantile({q}, sum by (le) (rate(odeserve_request_duration_seconds_bucket{{method="Embed"}}[1m])))'))
                check(v and math.isfinite(v[0][1]) and 0 < v[0][1] < 60, f"Embed p{int(q * 100)} from the histogram: {first(v):.4g} s")
            mean = vector(prom.query('sum(odeserve_request_duration_seconds_sum{method="Embed"}) / sum(odeserve_request_duration_seconds_count{method="Embed"})'))
            check(mean and 0 < mean[0][1] < 60, f"Embed mean latency {first(mean):.4g} s")
            steps = vector(prom.query(f'sum(odeserve_solver_steps_count{{model="{emb["name"]}"}})'))
            check(steps and steps[0][1] >= 1, f"odeserve_solver_steps observed {first(steps)} calls")
            budget = vector(prom.query('sum by (outcome) (odeserve_budget_requests_total)'))
            check(any(v > 0 for _, v in budget), f"odeserve_budget_requests_total: {[(m.get('outcome'), v) for m, v in budget]}")
            info = vector(prom.query("odeserve_model_info"))
            check({m["model"] for m, _ in info} >= {m["name"] for m in models},
                  f"odeserve_model_info for every READY model: {sorted(m['model'] for m, _ in info)}")

            # Rules: loaded and evaluated without error; recording rules produce series.
            time.sleep(2)
            groups = prom.get("/api/v1/rules")["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            check({g["name"] for g in groups} == {"odeserve.recording", "odeserve.alerts"},
                  f"rule groups loaded: {[g['name'] for g in groups]}")
            bad = [(r["name"], r.get("lastError")) for r in rules if r.get("health") != "ok"]
            check(not bad and rules, f"{len(rules)} rules evaluated, health ok (bad: {bad})")
            rec = vector(prom.query("odeserve:requests:rate5m"))
            check(len(rec) > 0, f"recording rule odeserve:requests:rate5m has {len(rec)} series")
            firing = [r["name"] for r in rules if r.get("state") == "firing"]
            check(not firing, f"no alert firing on a healthy server: {firing}")

            # Dashboard and adapter queries run against real data.
            exprs = [(w, substitute_grafana(e)) for w, e in dashboard_exprs(root)] + adapter_exprs(root)
            errors, with_data = [], 0
            for w, e in exprs:
                r = prom.query(e)
                if r.get("status") != "success":
                    errors.append(f"{w}: {r.get('error')}")
                elif r["data"]["result"]:
                    with_data += 1
            check(not errors, f"{len(exprs)} dashboard/adapter queries run, {with_data} return data; errors: {errors}")
            adapter = next(e for w, e in adapter_exprs(root) if "metricsQuery" in w)
            adapter = adapter.replace('namespace="odeserve",pod=~"odeserve-a|odeserve-b"', 'namespace="interop"').replace("by (pod)", "by (instance)")
            v = vector(prom.query(adapter))
            check(len(v) == 1, f"adapter-style query per target: {v}")
        except Exception as e:  # noqa: BLE001
            check(False, f"{type(e).__name__}: {e}")
        finally:
            if prom:
                prom.stop()
            rc = srv.terminate()
            c.close()
        check(rc == 0, f"odeserve exit code after SIGTERM: {rc}")
        if failures:
            print("--- odeserve log ---\n" + srv.log_tail())
            p = work / "prometheus.log"
            if p.exists():
                print("--- prometheus log ---\n" + p.read_text()[-3000:])
    if not failures and not a.workdir:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
