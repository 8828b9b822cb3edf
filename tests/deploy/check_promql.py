#!/usr/bin/env python3
"""PromQL outside the rule file is checked by promtool too.

The Grafana dashboard's queries (with $model / $__rate_interval substituted) and the
prometheus-adapter metricsQuery (with its <<...>> templates filled) are written into a
temporary rule file as recording rules and passed to `promtool check rules`, which parses every
expression. Also exports referenced_metric_names(): every odeserve_ metric name that the rules,
the adapter, the HPAs, the dashboard and docs/DEPLOY.md's metric reference use (the metrics
test checks that each exists in a real scrape).

  check_promql.py REPO_ROOT PROMTOOL
"""
from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys
import tempfile

import yaml

NAME = re.compile(r"(?<![A-Za-z0-9_:])odeserve_[a-z0-9_]*[a-z0-9]")


def dashboard_exprs(root: pathlib.Path) -> list[tuple[str, str]]:
    dash = json.loads((root / "deploy/grafana/odeserve.json").read_text())
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out.append((f"{p['title']} [{t['refId']}]", t["expr"]))
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if isinstance(q, str) and q.startswith("label_values("):
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", q)
            if m:
                out.append((f"variable {v['name']}", f"group by ({m.group(2)}) ({m.group(1)})"))
    return out


def substitute_grafana(expr: str) -> str:
    return (expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
            .replace("$model", ".*").replace("${model}", ".*"))


def adapter_exprs(root: pathlib.Path) -> list[tuple[str, str]]:
    cfg = yaml.safe_load((root / "deploy/prometheus-adapter/config.yaml").read_text())
    out = []
    for r in cfg["rules"]:
        series = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", r["seriesQuery"]).group(0)
        q = (r["metricsQuery"].replace("<<.Series>>", series)
             .replace("<<.LabelMatchers>>", 'namespace="odeserve",pod=~"odeserve-a|odeserve-b"')
             .replace("<<.GroupBy>>", "pod"))
        out.append((f"adapter {r['name']['as']} seriesQuery", r["seriesQuery"]))
        out.append((f"adapter {r['name']['as']} metricsQuery", q))
    return out


def referenced_metric_names(root: pathlib.Path) -> dict[str, set[str]]:
    """metric name -> files that use it."""
    sources = [root / "deploy/prometheus/rules.yml", root / "deploy/prometheus-adapter/config.yaml",
               root / "deploy/prometheus-adapter/values.yaml", root / "deploy/base/hpa.yaml",
               root / "deploy/overlays/gpu/hpa-gpu.yaml", root / "deploy/grafana/odeserve.json"]
    names: dict[str, set[str]] = {}
    for src in sources:
        for n in NAME.findall(src.read_text()):
            names.setdefault(n, set()).add(str(src.relative_to(root)))
    doc = root / "docs/DEPLOY.md"
    if doc.exists():
        m = re.search(r"<!-- metrics:begin -->(.*)<!-- metrics:end -->", doc.read_text(), re.S)
        if m:
            for n in NAME.findall(m.group(1)):
                names.setdefault(n, set()).add("docs/DEPLOY.md")
    return names


def main() -> int:
    root = pathlib.Path(sys.argv[1]).resolve()
    promtool = sys.argv[2] if len(sys.argv) > 2 else "promtool"
    exprs = [(w, substitute_grafana(e)) for w, e in dashboard_exprs(root)] + adapter_exprs(root)
    rules = {"groups": [{"name": "extracted", "rules": [
        {"record": f"extracted:expr_{i}", "expr": e} for i, (_, e) in enumerate(exprs)]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        yaml.safe_dump(rules, f)
    r = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True)
    pathlib.Path(f.name).unlink()
    print(r.stdout.strip())
    if r.returncode != 0:
        print(r.stderr)
        for i, (w, e) in enumerate(exprs):
            if f"expr_{i}" in r.stderr or f"[{i}]" in r.stderr:
                print(f"  -> {w}: {e}")
        return 1
    names = referenced_metric_names(root)
    print(f"{len(exprs)} expressions (dashboard + adapter) parse; "
          f"{len(names)} odeserve_ metric names referenced: {', '.join(sorted(names))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
