#!/usr/bin/env python3
"""Checks deploy/ and docker/compose.yaml without a cluster.

Every YAML/JSON file parses; every Kubernetes object has what the API server requires
(apiVersion, kind, DNS-1123 metadata.name) and what odeserve needs (selectors that match the
pod template, gRPC probes on port 8500 with the right health service, a grace period longer than
preStop + drain, ports that exist, an HPA on CPU + odeserve_queue_depth, ...). The kustomizations
are rendered with `kubectl kustomize` and the rendered objects checked by `--render` (its own
test, which reports SKIP, exit 77, where kubectl is not installed, instead of passing unseen);
the Compose file's build and mount paths must exist.

  check_manifests.py REPO_ROOT [--render]
"""
from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import sys

import yaml

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
API = {
    "Deployment": "apps/v1", "Service": "v1", "ConfigMap": "v1", "ServiceAccount": "v1",
    "HorizontalPodAutoscaler": "autoscaling/v2", "PodDisruptionBudget": "policy/v1",
    "ServiceMonitor": "monitoring.coreos.com/v1", "PrometheusRule": "monitoring.coreos.com/v1",
}
GRPC_PORT = 8500
INFERENCE = "odeserve.v1.Inference"

errors: list[str] = []
checked = 0


def err(where: str, msg: str) -> None:
    errors.append(f"{where}: {msg}")


def ok(cond: bool, where: str, msg: str) -> bool:
    global checked
    checked += 1
    if not cond:
        err(where, msg)
    return cond


def duration_seconds(s: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", s.strip())
    if not m:
        raise ValueError(f"bad duration {s!r}")
    return float(m.group(1)) * {"ms": 1e-3, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


def subset(sel: dict, labels: dict) -> bool:
    return bool(sel) and all(labels.get(k) == v for k, v in sel.items())


def check_objects(objs: list[dict], where: str, complete: bool) -> None:
    """Checks a set of Kubernetes objects. `complete`: cross-object references must resolve."""
    by_kind: dict[str, list[dict]] = {}
    for o in objs:
        w = f"{where}: {o.get('kind')}/{(o.get('metadata') or {}).get('name')}"
        ok(isinstance(o.get("apiVersion"), str) and o["apiVersion"], w, "apiVersion missing")
        ok(isinstance(o.get("kind"), str) and o["kind"], w, "kind missing")
        name = (o.get("metadata") or {}).get("name", "")
        ok(bool(name) and DNS1123.match(name) and len(name) <= 253, w, f"metadata.name {name!r} invalid")
        if o.get("kind") in API:
            ok(o["apiVersion"] == API[o["kind"]], w, f"apiVersion {o['apiVersion']} != {API[o['kind']]}")
        for k, v in ((o.get("metadata") or {}).get("labels") or {}).items():
            ok(isinstance(v, str), w, f"label {k} value must be a string")
        by_kind.setdefault(o.get("kind"), []).append(o)

    configmaps = {c["metadata"]["name"]: c.get("data") or {} for c in by_kind.get("ConfigMap", [])}
    for c in by_kind.get("ConfigMap", []):
        for k, v in (c.get("data") or {}).items():
            ok(isinstance(v, str), f"{where}: ConfigMap/{c['metadata']['name']}", f"data.{k} must be a string")

    deployments = by_kind.get("Deployment", [])
    if complete:
        ok(len(deployments) == 1, where, f"want exactly one Deployment, got {len(deployments)}")
    for d in deployments:
        check_deployment(d, f"{where}: Deployment/{d['metadata']['name']}", configmaps, complete)

    tmpl_labels = [((d["spec"]["template"].get("metadata") or {}).get("labels") or {}) for d in deployments]
    ports = {p.get("name"): p.get("containerPort") for d in deployments
             for c in d["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}

    services = by_kind.get("Service", [])
    for s in services:
        w = f"{where}: Service/{s['metadata']['name']}"
        sel = s["spec"].get("selector") or {}
        ok(bool(sel), w, "no selector")
        if complete:
            ok(any(subset(sel, t) for t in tmpl_labels), w, f"selector {sel} matches no pod template")
            for p in s["spec"].get("ports", []):
                tp = p.get("targetPort")
                ok(tp in ports if isinstance(tp, str) else tp in ports.values(), w,
                   f"targetPort {tp!r} is not a container port")
        ok(any(p.get("port") == GRPC_PORT for p in s["spec"].get("ports", [])), w, "no port 8500")
    if complete:
        ok(any(s["spec"].get("clusterIP") == "None" for s in services), where, "no headless Service")
        ok(any(s["spec"].get("clusterIP") != "None" for s in services), where, "no ClusterIP Service")

    for h in by_kind.get("HorizontalPodAutoscaler", []):
        w = f"{where}: HorizontalPodAutoscaler/{h['metadata']['name']}"
        spec = h["spec"]
        ref = spec.get("scaleTargetRef") or {}
        ok(ref.get("kind") == "Deployment" and ref.get("apiVersion") == "apps/v1", w, "scaleTargetRef must be an apps/v1 Deployment")
        if complete:
            ok(ref.get("name") in {d["metadata"]["name"] for d in deployments}, w, f"scaleTargetRef {ref.get('name')} not found")
        ok(1 <= spec.get("minReplicas", 1) <= spec.get("maxReplicas", 0), w, "need 1 <= minReplicas <= maxReplicas")
        metrics = spec.get("metrics") or []
        ok(any(m.get("type") == "Pods" and m["pods"]["metric"]["name"] == "odeserve_queue_depth"
               for m in metrics), w, "no Pods metric odeserve_queue_depth")
        for m in metrics:
            t = m.get("type")
            ok(t in ("Resource", "Pods", "Object", "External", "ContainerResource"), w, f"metric type {t}")
            body = m.get(t[0].lower() + t[1:]) if t else None
            ok(isinstance(body, dict) and "target" in body, w, f"{t} metric lacks target")

    for p in by_kind.get("PodDisruptionBudget", []):
        w = f"{where}: PodDisruptionBudget/{p['metadata']['name']}"
        sel = (p["spec"].get("selector") or {}).get("matchLabels") or {}
        ok(("minAvailable" in p["spec"]) != ("maxUnavailable" in p["spec"]), w, "set exactly one of minAvailable/maxUnavailable")
        if complete:
            ok(any(subset(sel, t) for t in tmpl_labels), w, f"selector {sel} matches no pod template")

    for sm in by_kind.get("ServiceMonitor", []):
        w = f"{where}: ServiceMonitor/{sm['metadata']['name']}"
        sel = (sm["spec"].get("selector") or {}).get("matchLabels") or {}
        eps = sm["spec"].get("endpoints") or []
        ok(bool(eps), w, "no endpoints")
        if complete:
            matched = [s for s in services if subset(sel, s["metadata"].get("labels") or {})]
            ok(len(matched) == 1, w, f"selector {sel} should match exactly one Service, matches {len(matched)}")
            for e in eps:
                ok(any(e.get("port") == p.get("name") for s in matched for p in s["spec"]["ports"]), w,
                   f"endpoint port {e.get('port')!r} not a named port of the selected Service")

    for r in by_kind.get("PrometheusRule", []):
        w = f"{where}: PrometheusRule/{r['metadata']['name']}"
        groups = r["spec"].get("groups") or []
        ok(bool(groups) and all(g.get("rules") for g in groups), w, "empty groups")


def check_deployment(d: dict, w: str, configmaps: dict, complete: bool) -> None:
    spec = d["spec"]
    sel = (spec.get("selector") or {}).get("matchLabels") or {}
    labels = (spec["template"].get("metadata") or {}).get("labels") or {}
    ok(subset(sel, labels), w, f"selector {sel} does not match template labels {labels}")
    pod = spec["template"]["spec"]
    containers = pod.get("containers") or []
    ok(len(containers) >= 1, w, "no containers")
    c = next((c for c in containers if c.get("name") == "odeserve"), containers[0])
    ok(bool(c.get("image")), w, "container has no image")
    ok(any(p.get("containerPort") == GRPC_PORT for p in c.get("ports", [])), w, "no containerPort 8500")
    want = {"startupProbe": INFERENCE, "livenessProbe": "", "readinessProbe": INFERENCE}
    for probe, service in want.items():
        p = c.get(probe)
        if not ok(isinstance(p, dict) and isinstance(p.get("grpc"), dict), w, f"{probe} is not a grpc: probe"):
            continue
        ok(p["grpc"].get("port") == GRPC_PORT, w, f"{probe}.grpc.port must be the number {GRPC_PORT}")
        ok(p["grpc"].get("service", "") == service, w, f"{probe}.grpc.service must be {service!r}")
    res = c.get("resources") or {}
    ok("cpu" in (res.get("requests") or {}) and "memory" in (res.get("requests") or {}), w, "no cpu/memory requests")
    ok("memory" in (res.get("limits") or {}), w, "no memory limit")
    psc = pod.get("securityContext") or {}
    ok(psc.get("runAsNonRoot") is True, w, "pod must runAsNonRoot")

    # Drain: grace period > preStop sleep + --drain_timeout (resolving $(VAR) from ConfigMaps).
    env = {}
    for ef in c.get("envFrom", []):
        name = (ef.get("configMapRef") or {}).get("name")
        if name in configmaps:
            env.update(configmaps[name])
        elif complete:
            err(w, f"envFrom ConfigMap {name} not found")
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
    args = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a) for a in
            (c.get("command") or []) + (c.get("args") or [])]
    drain = next((a.split("=", 1)[1] for a in args if a.startswith("--drain_timeout=")), "20s")
    if "$(" in drain:
        if complete:
            err(w, f"--drain_timeout {drain} unresolved")
        return
    pre = (c.get("lifecycle") or {}).get("preStop") or {}
    pre_s = 0.0
    if "sleep" in pre:
        pre_s = float(pre["sleep"]["seconds"])
    elif "exec" in pre:
        cmd = pre["exec"]["command"]
        ok(cmd[0].endswith("sleep"), w, f"preStop exec is not a sleep: {cmd}")
        pre_s = duration_seconds(cmd[-1])
    ok(pre_s > 0, w, "no preStop sleep (endpoint removal races the drain)")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    ok(grace > pre_s + duration_seconds(drain), w,
       f"terminationGracePeriodSeconds {grace} <= preStop {pre_s}s + drain {drain}")
    print(f"  {w}: grace {grace}s > preStop {pre_s:g}s + drain {drain}; probes grpc:{GRPC_PORT}")


def load_yaml_docs(path: pathlib.Path) -> list:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


SKIP = 77


def report() -> int:
    print(f"{checked} checks, {len(errors)} failed")
    for e in errors:
        print("FAIL", e)
    return 1 if errors else 0


def render_checks(root: pathlib.Path) -> int:
    """The rendered kustomizations (what `kubectl apply -k` sends)."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        print("SKIP: kubectl is not installed, so the kustomizations were not rendered "
              "(the raw manifests are checked by deploy_manifests)")
        return SKIP
    for target in ("deploy/base", "deploy", "deploy/overlays/gpu"):
        r = subprocess.run([kubectl, "kustomize", str(root / target)], capture_output=True, text=True)
        if not ok(r.returncode == 0, target, f"kubectl kustomize failed: {r.stderr.strip()}"):
            continue
        objs = [o for o in yaml.safe_load_all(r.stdout) if o]
        print(f"kubectl kustomize {target}: {len(objs)} objects "
              f"({', '.join(sorted({o['kind'] for o in objs}))})")
        check_objects(objs, f"{target} (rendered)", complete=True)
        if target == "deploy/overlays/gpu":
            dep = next(o for o in objs if o["kind"] == "Deployment")
            c = dep["spec"]["template"]["spec"]["containers"][0]
            ok(c["image"].endswith("cuda"), target, f"image {c['image']} is not a CUDA image")
            ok(c["resources"]["limits"].get("nvidia.com/gpu") == "1", target, "no nvidia.com/gpu limit")
            cm = next(o for o in objs if o["kind"] == "ConfigMap")
            ok(cm["data"]["ODESERVE_DEVICE"].startswith("cuda"), target, "device is not cuda")
        if target == "deploy":
            cms = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
            dash = cms.get("odeserve-grafana-dashboard")
            ok(dash is not None and json.loads(dash["data"]["odeserve.json"])["uid"] == "odeserve",
               target, "Grafana dashboard ConfigMap missing or wrong")
    return report()


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--render"]
    root = pathlib.Path(args[0] if args else ".").resolve()
    if "--render" in sys.argv[1:]:
        return render_checks(root)
    deploy = root / "deploy"

    # 1. every file parses
    files = sorted(p for p in deploy.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
    files.append(root / "docker" / "compose.yaml")
    for p in files:
        try:
            json.loads(p.read_text()) if p.suffix == ".json" else load_yaml_docs(p)
            ok(True, str(p), "")
        except Exception as e:  # noqa: BLE001
            err(str(p.relative_to(root)), f"does not parse: {e}")
    print(f"parsed {len(files)} files")

    # 2. kustomizations: listed files exist; raw objects checked
    for kfile in sorted(deploy.rglob("kustomization.yaml")):
        k = yaml.safe_load(kfile.read_text())
        for r in k.get("resources", []) + [p.get("path") for p in k.get("patches", []) if p.get("path")]:
            ok((kfile.parent / r).exists(), str(kfile.relative_to(root)), f"resource {r} missing")
        for g in k.get("configMapGenerator", []):
            for f in g.get("files", []):
                ok((kfile.parent / f.split("=", 1)[-1]).exists(), str(kfile.relative_to(root)), f"file {f} missing")
    raw = []
    for sub in ("base", "monitoring"):
        for p in sorted((deploy / sub).glob("*.yaml")):
            if p.name != "kustomization.yaml":
                raw += load_yaml_docs(p)
    check_objects(raw, "deploy/{base,monitoring} (raw)", complete=False)

    # 3. the rendered kustomizations: check_manifests.py --render, its own test
    # 4. prometheus-adapter: config.yaml and Helm values carry the same rule
    adapter = yaml.safe_load((deploy / "prometheus-adapter" / "config.yaml").read_text())
    values = yaml.safe_load((deploy / "prometheus-adapter" / "values.yaml").read_text())
    ok(adapter["rules"] == values["rules"]["custom"], "deploy/prometheus-adapter",
       "config.yaml rules != values.yaml rules.custom")
    ok(any(r["name"]["as"] == "odeserve_queue_depth" for r in adapter["rules"]), "deploy/prometheus-adapter",
       "no rule serves odeserve_queue_depth")

    # 5. Compose
    compose_path = root / "docker" / "compose.yaml"
    compose = yaml.safe_load(compose_path.read_text())
    svcs = compose.get("services", {})
    w = "docker/compose.yaml"
    ok({"odeserve", "prometheus", "grafana"} <= set(svcs), w, "needs odeserve, prometheus, grafana")
    b = svcs["odeserve"]["build"]
    ok((compose_path.parent / b["context"] / b["dockerfile"]).exists(), w, "build dockerfile missing")
    for name, s in svcs.items():
        for v in s.get("volumes", []):
            src = v.split(":", 1)[0]
            if src.startswith((".", "/")):
                ok((compose_path.parent / src).exists(), w, f"{name}: mount source {src} missing")
    drain = next((a.split("=", 1)[1] for a in svcs["odeserve"].get("command", [])
                  if a.startswith("--drain_timeout=")), "20s")
    ok(duration_seconds(svcs["odeserve"].get("stop_grace_period", "10s")) > duration_seconds(drain), w,
       "stop_grace_period must exceed --drain_timeout")

    # 6. Grafana
    dash = json.loads((deploy / "grafana" / "odeserve.json").read_text())
    ids = [p["id"] for p in dash["panels"]]
    ok(len(ids) == len(set(ids)), "grafana/odeserve.json", "duplicate panel ids")
    text = json.dumps(dash)
    for metric in ("odeserve_requests_total", "odeserve_request_duration_seconds_bucket",
                   "odeserve_queue_depth", "odeserve_solver_steps", "odeserve_budget_requests_total",
                   "odeserve_batch_size", "odeserve_cost_model_relative_error_bucket", "odeserve_joined_rows_total"):
        ok(metric in text, "grafana/odeserve.json", f"no panel uses {metric}")
    for p in dash["panels"]:
        if p["type"] != "row":
            ok(all(t.get("expr") for t in p.get("targets", [])) and p.get("targets"),
               "grafana/odeserve.json", f"panel {p['title']!r} has a target without expr")

    return report()


if __name__ == "__main__":
    sys.exit(main())
