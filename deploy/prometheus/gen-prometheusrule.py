#!/usr/bin/env python3
"""Generates deploy/monitoring/prometheusrule.yaml (Prometheus Operator) from the plain rule
file deploy/prometheus/rules.yml, which stays the one source of the rules.

  deploy/prometheus/gen-prometheusrule.py           rewrite the PrometheusRule
  deploy/prometheus/gen-prometheusrule.py --check   exit 1 if it is out of date (a ctest)
"""
import difflib
import pathlib
import sys

import yaml

here = pathlib.Path(__file__).resolve().parent
src = here / "rules.yml"
dst = here.parent / "monitoring" / "prometheusrule.yaml"

HEADER = """\
# GENERATED from deploy/prometheus/rules.yml by deploy/prometheus/gen-prometheusrule.py.
# Do not edit: change rules.yml and rerun the generator (ctest deploy_prometheusrule_in_sync).
"""


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper, s):
    style = "|" if "\n" in s else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style=style)


_Dumper.add_representer(str, _str)


def render() -> str:
    rules = yaml.safe_load(src.read_text())
    obj = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "odeserve",
            "labels": {"app.kubernetes.io/component": "monitoring",
                       # the label kube-prometheus-stack's Prometheus selects rules by
                       "release": "kube-prometheus-stack"},
        },
        "spec": {"groups": rules["groups"]},
    }
    return HEADER + yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=100)


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        have = dst.read_text() if dst.exists() else ""
        if have != text:
            sys.stdout.writelines(difflib.unified_diff(
                have.splitlines(True), text.splitlines(True), str(dst), "generated"))
            print(f"\n{dst} is out of date: run {pathlib.Path(__file__).name}")
            return 1
        # Belt and braces: the groups parse back to exactly the source's.
        assert yaml.safe_load(have)["spec"]["groups"] == yaml.safe_load(src.read_text())["groups"]
        print(f"{dst.name} matches {src.name}")
        return 0
    dst.write_text(text)
    print(f"wrote {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
