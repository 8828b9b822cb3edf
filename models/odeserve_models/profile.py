"""`python3 -m odeserve_models profile`: a served model's quality at every (solver, steps) on a
labelled JSONL file, through a running odeserve over gRPC -> quality.pbtxt and the recommended
default_steps.

    cd models
    # against a running server (TLS and a bearer token when it is secured)
    /usr/bin/python3 -m odeserve_models profile --address localhost:8500 --model classify-sections \\
        --data valid.jsonl [--tls_ca ca.pem] [--token token.txt]
    # or start one on a model repository (and stop it afterwards)
    /usr/bin/python3 -m odeserve_models profile --start ../build/server/odeserve \\
        --model_repository repository --model embed-eelbert --data pairs.jsonl
    # measure, then write quality.pbtxt into the model folder and let the server follow it
    ... --apply repository/classify-sections

Data: one JSON object per line. CLASSIFICATION models: a text and a label (--text_field,
--label_field); metrics accuracy (primary) and macro_f1. EMBEDDING models: a query and its
matching document (--query_field, --document_field); both sides embedded (normalize=true), each
query ranks every document by cosine; metrics recall@1 (primary) and recall@10.

Every call names its steps and solver exactly (never a budget), so the profile measures what each
(solver, steps) point computes. The recommended default is the server's own rule for
`steps { default_steps: 0 }`: the cheapest Euler point whose primary metric is within
quality_tolerance of the best Euler point (inclusive: value >= best - tolerance, the comparison
the server's scheduler makes).
"""
import argparse
import importlib
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .baselines import macro_f1, recall_at_k

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SOLVERS = ("EULER", "HEUN", "RK4")
EVALUATIONS_PER_STEP = {"EULER": 1, "HEUN": 2, "RK4": 4}
CLASSIFICATION_METRICS = ("accuracy", "macro_f1")  # the first is primary
RETRIEVAL_METRICS = ("recall@1", "recall@10")
# Added to the automatic tolerance: values of k/N and a tolerance of d/N meet at exactly d items
# apart, where floating-point rounding would put about one such pair in eight on the wrong side
# of `value >= best - tolerance`. 1e-9 is far below 1/N for any file this tool can measure.
TOLERANCE_SLACK = 1e-9


class ProfileError(Exception):
    """A problem of the user's input (data file, options, model folder): printed, exit code 2."""


# ------------------------------------------------------------------------------------ pure parts
def parse_steps(spec: str, lo: Optional[int] = None, hi: Optional[int] = None) -> List[int]:
    """"1-8,16" -> [1, ..., 8, 16]: comma-separated step counts and inclusive ranges, sorted and
    deduplicated; with lo/hi, every step must lie in [lo, hi] (the model's range)."""
    out = set()
    parts = [p.strip() for p in (spec or "").split(",")]
    if not any(parts):
        raise ProfileError("--steps: empty step list")
    for part in parts:
        if not part:
            raise ProfileError("--steps '%s': empty item" % spec)
        a, sep, b = part.partition("-")
        try:
            first = int(a)
            last = int(b) if sep else first
        except ValueError:
            raise ProfileError("--steps '%s': '%s' is not a step count or a range like 1-8" % (spec, part))
        if first < 1 or last < 1:
            raise ProfileError("--steps '%s': step counts are >= 1" % spec)
        if last < first:
            raise ProfileError("--steps '%s': range '%s' runs backwards" % (spec, part))
        out.update(range(first, last + 1))
    steps = sorted(out)
    if lo is not None and hi is not None:
        outside = [s for s in steps if s < lo or s > hi]
        if outside:
            raise ProfileError("--steps '%s': %s outside the model's step range [%d, %d]" % (
                spec, _steps_spec(outside), lo, hi))
    return steps


def parse_solvers(spec: str, allowed: Sequence[str]) -> List[str]:
    """"euler,heun" -> ["EULER", "HEUN"] (case-insensitive); empty -> every allowed solver. Each must
    be one the model allows."""
    if not spec:
        return list(allowed)
    out = []
    for part in spec.split(","):
        name = part.strip().upper()
        if name not in SOLVERS:
            raise ProfileError("--solvers: unknown solver '%s' (known: %s)" % (part.strip(), ", ".join(SOLVERS)))
        if name not in allowed:
            raise ProfileError("--solvers: the model does not allow %s (it allows %s)" % (name, ", ".join(allowed)))
        if name not in out:
            out.append(name)
    return out


def read_jsonl(path: str, fields: Sequence[str], limit: int = 0, field_options: Optional[Dict[str, str]] = None,
               label_field: str = "") -> List[Tuple[int, Tuple[str, ...]]]:
    """-> [(line number, (value of each field))] for the first `limit` records (0 = all). Blank
    lines are skipped. Every field must be present and a non-empty string (the label field may also
    be an integer, read as its decimal text). Errors name the file and the line (1-based).
    field_options: field -> the option that chose it, for the error message."""
    field_options = field_options or {}
    records = []
    try:
        f = open(path, "rb")
    except OSError as e:
        raise ProfileError("--data: cannot read '%s': %s" % (path, e.strerror or e))
    with f:
        for line_no, raw in enumerate(f, 1):
            if limit and len(records) >= limit:
                break
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ProfileError("%s:%d: not valid UTF-8" % (path, line_no))
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ProfileError("%s:%d: not valid JSON (%s at column %d)" % (path, line_no, e.msg, e.colno))
            if not isinstance(obj, dict):
                raise ProfileError("%s:%d: expected a JSON object, found %s" % (path, line_no, type(obj).__name__))
            values = []
            for name in fields:
                if name not in obj:
                    opt = field_options.get(name)
                    raise ProfileError("%s:%d: no field '%s' (the line has: %s)%s" % (
                        path, line_no, name, ", ".join(sorted(obj)) or "no fields",
                        "; choose another with %s" % opt if opt else ""))
                v = obj[name]
                if name == label_field and isinstance(v, int) and not isinstance(v, bool):
                    v = str(v)
                if not isinstance(v, str):
                    raise ProfileError("%s:%d: field '%s' must be a string, found %s" % (
                        path, line_no, name, type(v).__name__))
                if not v.strip():
                    raise ProfileError("%s:%d: field '%s' is empty" % (path, line_no, name))
                values.append(v)
            records.append((line_no, tuple(values)))
    if not records:
        raise ProfileError("--data: '%s' holds no records" % path)
    return records


def check_labels(path: str, line_numbers: Sequence[int], labels: Sequence[str], model_labels: Sequence[str]) -> None:
    """Every label must be one of the model's: the error names the first offending lines."""
    known = set(model_labels)
    bad = [(n, l) for n, l in zip(line_numbers, labels) if l not in known]
    if bad:
        shown = "; ".join("line %d: '%s'" % b for b in bad[:5]) + ("; ..." if len(bad) > 5 else "")
        raise ProfileError("%s:%d: label '%s' is not one of the model's labels (%s). %d line(s) with unknown labels: %s" % (
            path, bad[0][0], bad[0][1], ", ".join(model_labels), len(bad), shown))


def accuracy(y_true: Sequence[int], y_pred: Sequence[int]) -> float:
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    return float((y_true == y_pred).mean())


def classification_metrics(y_true: Sequence[int], y_pred: Sequence[int], n_classes: int) -> Dict[str, float]:
    """accuracy and macro-F1 (baselines.macro_f1: the mean F1 over classes present in the labels
    or the predictions)."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    return {"accuracy": accuracy(y_true, y_pred), "macro_f1": float(macro_f1(y_true, y_pred, n_classes))}


def _unit_rows(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


def retrieval_metrics(queries: np.ndarray, documents: np.ndarray) -> Dict[str, float]:
    """queries[i] matches documents[i]; every query ranks every document by cosine. recall@k with
    ties broken at random in expectation (baselines.recall_at_k)."""
    sim = _unit_rows(np.asarray(queries, dtype=np.float64)) @ _unit_rows(np.asarray(documents, dtype=np.float64)).T
    r = recall_at_k(sim, (1, 10))
    return {"recall@1": r[1], "recall@10": r[10]}


def resolve_tolerance(spec: str, items: int) -> Tuple[float, str]:
    """--quality_tolerance: "auto" -> export.unresolvable_gap(items) (the largest gap of two
    proportions over `items` that an exact McNemar test at 5% can never resolve) plus
    TOLERANCE_SLACK; or a number >= 0, used as given. -> (tolerance, how it was chosen)."""
    if spec.strip().lower() == "auto":
        from .export import unresolvable_gap  # imports torch: only when needed
        gap = unresolvable_gap(items)
        d = int(round(gap * items))
        return gap + TOLERANCE_SLACK, "auto: %d of %d items, the largest gap an exact McNemar test at 5%% cannot resolve" % (d, items)
    try:
        t = float(spec)
    except ValueError:
        raise ProfileError("--quality_tolerance: '%s' is neither 'auto' nor a number" % spec)
    if not (t >= 0 and math.isfinite(t)):
        raise ProfileError("--quality_tolerance: must be a finite number >= 0, got %s" % spec)
    return t, "given"


def recommend_default(points: Sequence[Dict], primary_metric: str, tolerance: float) -> Optional[Dict]:
    """The server's rule for `default_steps: 0`: among the Euler points of the primary metric, the
    fewest steps whose value is within `tolerance` of the best, inclusive (value >= best -
    tolerance, written as the server's `!(value < best - tolerance)`). -> dict(steps, value,
    best_steps (fewest steps reaching the best), best_value), or None without Euler points."""
    euler = sorted(((p["steps"], p["value"]) for p in points
                    if p["solver"] == "EULER" and p["metric"] == primary_metric), key=lambda sv: sv[0])
    if not euler:
        return None
    best = max(v for _, v in euler)
    best_steps = min(s for s, v in euler if v == best)
    steps, value = next((s, v) for s, v in euler if not (v < best - tolerance))
    return dict(steps=steps, value=value, best_steps=best_steps, best_value=best)


def depth_gain(points: Sequence[Dict], primary_metric: str, trained_depth: int) -> str:
    """One line: the primary metric at 1 Euler step and at the trained depth."""
    v = {p["steps"]: p["value"] for p in points if p["solver"] == "EULER" and p["metric"] == primary_metric}
    if 1 not in v or trained_depth not in v:
        missing = [str(s) for s in sorted({1, trained_depth}) if s not in v]
        return "gain from 1 step to the trained depth (%d): not measured (Euler at %s step(s) missing)" % (
            trained_depth, " and ".join(missing))
    if trained_depth == 1:
        return "gain from 1 step to the trained depth: none to measure (trained depth 1)"
    a, b = v[1], v[trained_depth]
    return "gain from 1 step to the trained depth (%d Euler steps): %s %.4f -> %.4f (%+.2f points%s)" % (
        trained_depth, primary_metric, a, b, 100 * (b - a),
        ", %+.1f%% relative" % (100 * (b - a) / a) if a > 0 else "")


def make_points(measured: Sequence[Tuple[str, int, Dict[str, float]]], metrics: Sequence[str], dataset: str) -> List[Dict]:
    """measured: [(solver, steps, {metric: value})] -> one point dict per (solver, steps, metric),
    in the order given and the metrics' order."""
    return [dict(solver=solver, steps=steps, metric=m, value=float(values[m]), dataset=dataset)
            for solver, steps, values in measured for m in metrics]


def dataset_name(data_path: str, items: int) -> str:
    return "%s (%d)" % (os.path.basename(data_path), items)


# ------------------------------------------------------------------------------- protobuf text
_PROTOS = None


def load_protos():
    """-> (inference_pb2, inference_pb2_grpc, model_config_pb2), generated from proto/ with protoc
    and /usr/bin/grpc_python_plugin (as served.Served does) on first use."""
    global _PROTOS
    if _PROTOS is None:
        if "odeserve.v1.model_config_pb2" not in sys.modules:
            tmp = tempfile.mkdtemp(prefix="odeserve-profile-stubs-")
            try:
                subprocess.check_call(["protoc", "-I", os.path.join(ROOT, "proto"), "--python_out", tmp,
                                       "--grpc_out", tmp, "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin",
                                       "odeserve/v1/inference.proto", "odeserve/v1/model_config.proto"])
                sys.path.insert(0, tmp)
                try:
                    _PROTOS = tuple(importlib.import_module("odeserve.v1." + m)
                                    for m in ("inference_pb2", "inference_pb2_grpc", "model_config_pb2"))
                finally:
                    sys.path.remove(tmp)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        else:
            _PROTOS = tuple(sys.modules["odeserve.v1." + m] for m in ("inference_pb2", "inference_pb2_grpc", "model_config_pb2"))
    return _PROTOS


def profile_message(primary_metric: str, points: Sequence[Dict]):
    """-> an odeserve.v1.QualityProfile."""
    pb, _, mc = load_protos()
    prof = mc.QualityProfile(primary_metric=primary_metric)
    for p in points:
        prof.points.add(solver=pb.Solver.Value(p["solver"]), steps=p["steps"], metric=p["metric"],
                        value=p["value"], dataset=p["dataset"])
    return prof


def profile_text(profile) -> str:
    """Text format, one line per point like models/repository/*/quality.pbtxt. Values keep every
    digit (Python's shortest round-trip form), so the server reads the very doubles the
    recommendation was computed from."""
    from google.protobuf import text_format
    head = type(profile)(primary_metric=profile.primary_metric)
    lines = [text_format.MessageToString(head, as_one_line=True)]
    lines += ["points { %s }" % text_format.MessageToString(p, as_one_line=True) for p in profile.points]
    return "\n".join(lines) + "\n"


def points_of(profile) -> List[Dict]:
    """QualityProfile -> point dicts (the inverse of profile_message)."""
    pb, _, _ = load_protos()
    return [dict(solver=pb.Solver.Name(p.solver), steps=p.steps, metric=p.metric, value=p.value, dataset=p.dataset)
            for p in profile.points]


def parse_profile_text(text: str):
    from google.protobuf import text_format
    _, _, mc = load_protos()
    return text_format.Parse(text, mc.QualityProfile())


def _write_atomically(path: str, text: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if os.path.exists(path):
            shutil.copymode(path, tmp)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def apply_to_model_dir(model_dir: str, model_name: str, quality_text: str, tolerance: float,
                       quality_file: str = "quality.pbtxt") -> Dict:
    """Writes `quality_text` to MODEL_DIR/quality.pbtxt and edits MODEL_DIR/config.pbtxt through
    odeserve.v1.ModelConfig (parsed, changed, written back in text format): quality_profile_file
    and quality_tolerance set, steps.default_steps cleared (0: the server follows the profile).
    The config must be the profiled model's (same name) and allow every solver of the profile.
    -> dict(config, previous_default_steps, previous_tolerance, previous_profile_file, comments_dropped)."""
    from google.protobuf import text_format
    pb, _, mc = load_protos()
    cfg_path = os.path.join(model_dir, "config.pbtxt")
    try:
        with open(cfg_path, encoding="utf-8") as f:
            original = f.read()
    except OSError as e:
        raise ProfileError("--apply: cannot read '%s': %s" % (cfg_path, e.strerror or e))
    cfg = mc.ModelConfig()
    try:
        text_format.Parse(original, cfg)
    except text_format.ParseError as e:
        raise ProfileError("--apply: '%s' is not a valid ModelConfig: %s" % (cfg_path, e))
    if cfg.name != model_name:
        raise ProfileError("--apply: '%s' configures model '%s', but the profile was measured on '%s'" % (
            cfg_path, cfg.name, model_name))
    profile = parse_profile_text(quality_text)
    allowed = {pb.Solver.Name(s) for s in cfg.solvers} or {"EULER"}
    foreign = sorted({pb.Solver.Name(p.solver) for p in profile.points} - allowed)
    if foreign:
        raise ProfileError("--apply: the profile has %s points, but '%s' allows only %s" % (
            ", ".join(foreign), cfg_path, ", ".join(sorted(allowed))))
    result = dict(config=cfg_path, previous_default_steps=cfg.steps.default_steps if cfg.HasField("steps") else 0,
                  previous_tolerance=cfg.quality_tolerance, previous_profile_file=cfg.quality_profile_file,
                  comments_dropped=any(l.lstrip().startswith("#") for l in original.splitlines()))
    cfg.quality_profile_file = quality_file
    cfg.quality_tolerance = tolerance
    if cfg.HasField("steps"):
        cfg.steps.default_steps = 0  # proto3: 0 is not written, so the field disappears
    new_text = text_format.MessageToString(cfg)
    text_format.Parse(new_text, mc.ModelConfig())  # what we write must read back
    _write_atomically(os.path.join(model_dir, quality_file), quality_text)
    _write_atomically(cfg_path, new_text)
    return result


# ------------------------------------------------------------------------------------- output
def format_table(points: Sequence[Dict], metrics: Sequence[str], solvers: Sequence[str], steps: Sequence[int],
                 seconds: Dict[Tuple[str, int], float], rec: Optional[Dict]) -> str:
    v = {(p["solver"], p["steps"], p["metric"]): p["value"] for p in points}
    head = ["solver", "steps", "field_evals"] + list(metrics) + ["seconds", ""]
    rows = []
    for solver in solvers:
        for n in steps:
            note = []
            if rec and solver == "EULER" and n == rec["best_steps"]:
                note.append("best")
            if rec and solver == "EULER" and n == rec["steps"]:
                note.append("<- recommended default")
            rows.append([solver, str(n), str(n * EVALUATIONS_PER_STEP[solver])]
                        + ["%.4f" % v[(solver, n, m)] for m in metrics]
                        + ["%.2f" % seconds.get((solver, n), float("nan")), ", ".join(note)])
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    lines = []
    for r in [head] + rows:
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:-1], widths[1:-1])] + [r[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


class Progress:
    """A progress bar on stderr: redrawn in place on a terminal (after every call and every
    finished point; close() ends the line), one line per finished point otherwise (logs). The
    percentage counts calls, the points count finished (solver, steps) points."""

    def __init__(self, total_calls: int, total_points: int, label: str, stream=None):
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total, self.points_total, self.label = max(1, total_calls), total_points, label
        self.done = self.points = 0
        self.t0 = time.time()

    def _bar(self, what: str) -> str:
        frac = self.done / self.total
        filled = int(round(30 * frac))
        el = time.time() - self.t0
        eta = el / frac - el if frac > 0 else 0
        return "%s [%s%s] %3d%% %d/%d points %s, %ds elapsed, ~%ds left" % (
            self.label, "#" * filled, "." * (30 - filled), int(100 * frac), self.points, self.points_total,
            what, el, eta)

    def call(self, what: str) -> None:
        self.done += 1
        if self.tty:
            self.stream.write("\r\x1b[K" + self._bar(what))
            self.stream.flush()

    def point(self, what: str) -> None:
        self.points += 1
        if self.tty:  # redrawn, so that the bar's last state counts the last point too
            self.stream.write("\r\x1b[K" + self._bar(what))
        else:
            self.stream.write(self._bar(what) + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


# ----------------------------------------------------------------------------------- measuring
def _batches(items: Sequence, per: int):
    for i in range(0, len(items), per):
        yield items[i:i + per]


class Measurer:
    """Calls the server for one (solver, steps) point at a time, exact steps and solver."""

    def __init__(self, pb, stub, model, per_request: int, timeout: float, metadata, truncate: bool, progress: Progress):
        self.pb, self.stub, self.model = pb, stub, model
        self.per, self.timeout, self.metadata = per_request, timeout, metadata
        self.truncate, self.progress = truncate, progress
        self.truncated = 0

    def _compute(self, solver: str, steps: int):
        return self.pb.ComputeOptions(steps=steps, solver=self.pb.Solver.Value(solver))

    def _check(self, report, solver: str, steps: int) -> None:
        if report.steps != steps or self.pb.Solver.Name(report.solver) != solver:
            raise RuntimeError("the server ran %s x %d for a call that asked for %s x %d" % (
                self.pb.Solver.Name(report.solver), report.steps, solver, steps))

    def classify(self, texts: Sequence[str], solver: str, steps: int) -> List[str]:
        out = []
        for chunk in _batches(texts, self.per):
            r = self.stub.Classify(self.pb.ClassifyRequest(model=self.model, inputs=list(chunk), top_k=1,
                                                           truncate=self.truncate, compute=self._compute(solver, steps)),
                                   timeout=self.timeout, metadata=self.metadata)
            self._check(r.report, solver, steps)
            self.truncated += r.report.truncated_inputs
            out.extend(res.labels[0].label for res in r.results)
            self.progress.call("%s x %d" % (solver, steps))
        return out

    def embed(self, texts: Sequence[str], solver: str, steps: int) -> np.ndarray:
        vecs = []
        for chunk in _batches(texts, self.per):
            r = self.stub.Embed(self.pb.EmbedRequest(model=self.model, inputs=list(chunk), normalize=True,
                                                     truncate=self.truncate, compute=self._compute(solver, steps)),
                                timeout=self.timeout, metadata=self.metadata)
            self._check(r.report, solver, steps)
            self.truncated += r.report.truncated_inputs
            vecs.extend(list(e.values) for e in r.embeddings)
            self.progress.call("%s x %d" % (solver, steps))
        return np.array(vecs, dtype=np.float32)


# ---------------------------------------------------------------------------------- connection
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ProfileError("--token: cannot read '%s': %s" % (path, e.strerror or e))
    for line in text.splitlines():
        t = line.strip()
        if t and not t.startswith("#"):
            return t
    raise ProfileError("--token: '%s' holds no token" % path)


def _channel(args):
    import grpc
    options = [("grpc.max_receive_message_length", 64 << 20)]
    if args.tls or args.tls_ca:
        roots = None
        if args.tls_ca:
            try:
                with open(args.tls_ca, "rb") as f:
                    roots = f.read()
            except OSError as e:
                raise ProfileError("--tls_ca: cannot read '%s': %s" % (args.tls_ca, e.strerror or e))
            if not roots.strip():
                raise ProfileError("--tls_ca: '%s' is empty" % args.tls_ca)
        if args.tls_server_name:
            options.append(("grpc.ssl_target_name_override", args.tls_server_name))
        return grpc.secure_channel(args.address, grpc.ssl_channel_credentials(root_certificates=roots), options=options)
    return grpc.insecure_channel(args.address, options=options)


def _get_model(pb, stub, name: str, metadata, wait_s: float):
    """GetModel, waiting while the server starts (UNAVAILABLE) or the model loads."""
    import grpc
    deadline = time.time() + wait_s
    while True:
        try:
            m = stub.GetModel(pb.GetModelRequest(name=name), timeout=10, metadata=metadata).model
            if m.state != pb.LOADING:
                return m
            why = "model '%s' still loading" % name
        except grpc.RpcError as e:
            if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
            why = "%s: %s" % (e.code().name, e.details())
        if time.time() > deadline:
            raise RuntimeError("gave up after %ds waiting for the server (%s)" % (wait_s, why))
        time.sleep(1)


# ----------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python3 -m odeserve_models profile",
        description="Measure a served model's quality at every (solver, steps) on a labelled JSONL file, "
                    "write quality.pbtxt and recommend default_steps.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    s = ap.add_argument_group("server")
    s.add_argument("--address", default="", help="host:port of a running server (default localhost:8500 unless --start)")
    s.add_argument("--tls", action="store_true", help="TLS with the system roots")
    s.add_argument("--tls_ca", default="", help="PEM roots that verify the server (implies TLS)")
    s.add_argument("--tls_server_name", default="", help="override the name checked in the server certificate")
    s.add_argument("--token", default="", help="file holding the bearer token (default: $ODESERVE_TOKEN)")
    s.add_argument("--start", default="", help="server binary to start (and stop afterwards) instead of --address")
    s.add_argument("--model_repository", default="", help="with --start: the model repository")
    s.add_argument("--grpc_port", type=int, default=0, help="with --start: its gRPC port (0: a free one)")
    s.add_argument("--server_log", default="", help="with --start: the server's log (default: a temporary file)")
    s.add_argument("--timeout", type=float, default=600.0, help="gRPC deadline of each call, seconds")
    s.add_argument("--wait", type=float, default=300.0, help="seconds to wait for the server / model to be ready")
    d = ap.add_argument_group("data")
    d.add_argument("--model", required=True, help="the served model to profile")
    d.add_argument("--data", required=True, help="labelled JSONL file, one object per line")
    d.add_argument("--text_field", default="text", help="classification: the text")
    d.add_argument("--label_field", default="label", help="classification: the label (one of the model's)")
    d.add_argument("--query_field", default="query", help="embedding: the query")
    d.add_argument("--document_field", default="document", help="embedding: the query's matching document")
    d.add_argument("--limit", type=int, default=0, help="use the first N records (0: all)")
    d.add_argument("--no_truncate", action="store_true",
                   help="refuse inputs longer than the model's max_sequence_length instead of cutting them")
    m = ap.add_argument_group("measurement and output")
    m.add_argument("--solvers", default="", help="comma list, e.g. EULER,HEUN (default: every solver the model allows)")
    m.add_argument("--steps", default="", help="e.g. 1-8,16 (default: every step count in the model's range)")
    m.add_argument("--quality_tolerance", default="auto",
                   help="'auto' (the gap the data cannot resolve) or a number in the primary metric's units")
    m.add_argument("--out", default=None, help="quality profile to write (default ./quality.pbtxt; with --apply only MODEL_DIR/quality.pbtxt)")
    m.add_argument("--apply", default="", metavar="MODEL_DIR",
                   help="also write MODEL_DIR/quality.pbtxt and set config.pbtxt to follow it")
    return ap


def main(argv) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except ProfileError as e:
        sys.stderr.write("profile: %s\n" % e)
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("profile: interrupted\n")
        return 130


def _run(args) -> int:
    import grpc
    if args.limit < 0:
        raise ProfileError("--limit must be >= 0")
    if args.timeout <= 0:
        raise ProfileError("--timeout must be > 0")
    if args.start and (args.address or args.tls or args.tls_ca or args.token):
        raise ProfileError("--start runs a local server without TLS or tokens: drop --address/--tls/--tls_ca/--token")
    if args.start and not args.model_repository:
        raise ProfileError("--start needs --model_repository")
    if args.start and not (os.path.isfile(args.start) and os.access(args.start, os.X_OK)):
        raise ProfileError("--start: '%s' is not an executable file" % args.start)
    if args.start and not os.path.isfile(os.path.join(args.model_repository, args.model, "config.pbtxt")):
        raise ProfileError("--model_repository: '%s' has no model folder '%s' with a config.pbtxt" % (
            args.model_repository, args.model))
    if args.apply and not os.path.isfile(os.path.join(args.apply, "config.pbtxt")):
        raise ProfileError("--apply: '%s' has no config.pbtxt" % args.apply)
    if not os.path.isfile(args.data):
        raise ProfileError("--data: '%s' is not a file" % args.data)
    out_path = args.out if args.out is not None else ("" if args.apply else "quality.pbtxt")
    token = _read_token(args.token) if args.token else os.environ.get("ODESERVE_TOKEN", "")
    metadata = (("authorization", "Bearer " + token),) if token else None
    if token and not (args.tls or args.tls_ca):
        sys.stderr.write("profile: warning: the bearer token travels in clear text (no --tls/--tls_ca)\n")
    pb, pbg, _ = load_protos()

    served = None
    log_dir = None
    log_path = ""
    try:
        if args.start:
            from .served import Served
            if args.server_log:
                log_path = args.server_log
            else:
                log_dir = tempfile.mkdtemp(prefix="odeserve-profile-")
                log_path = os.path.join(log_dir, "server.log")
            port = args.grpc_port or _free_port()
            served = Served(start=args.start, model_repository=args.model_repository, grpc_port=port,
                            metrics_port=-1, log_path=log_path)
            try:
                served.__enter__()
            except RuntimeError as e:
                raise ProfileError("--start: %s%s" % (e, _log_tail(log_path)))
            stub = pbg.InferenceStub(served.channel)
            address = served.address
        else:
            address = args.address or "localhost:8500"
            args.address = address
            stub = pbg.InferenceStub(_channel(args))
        try:
            info = _get_model(pb, stub, args.model, metadata, args.wait)
        except grpc.RpcError as e:
            raise ProfileError("GetModel '%s' at %s: %s: %s%s" % (args.model, address, e.code().name, e.details(),
                                                                _log_tail(log_path) if args.start else ""))
        except RuntimeError as e:
            raise ProfileError("%s at %s: %s" % (args.model, address, e))
        if info.state != pb.READY:
            raise ProfileError("model '%s' is %s: %s%s" % (args.model, pb.ModelState.Name(info.state), info.error,
                                                          _log_tail(log_path) if args.start else ""))
        return _profile(args, pb, stub, info, metadata, out_path)
    finally:
        if served is not None:
            served.__exit__(None, None, None)
        if log_dir:
            shutil.rmtree(log_dir, ignore_errors=True)


def _profile(args, pb, stub, info, metadata, out_path) -> int:
    import grpc
    task = pb.Task.Name(info.task)
    if info.task == pb.CLASSIFICATION:
        fields = (args.text_field, args.label_field)
        options = {args.text_field: "--text_field", args.label_field: "--label_field"}
        metrics = CLASSIFICATION_METRICS
    elif info.task == pb.EMBEDDING:
        fields = (args.query_field, args.document_field)
        options = {args.query_field: "--query_field", args.document_field: "--document_field"}
        metrics = RETRIEVAL_METRICS
    else:
        raise ProfileError("model '%s' is a %s model: profile measures CLASSIFICATION (accuracy) and EMBEDDING "
                           "(retrieval) models" % (info.name, task))
    primary = metrics[0]
    records = read_jsonl(args.data, fields, args.limit, options,
                         label_field=args.label_field if info.task == pb.CLASSIFICATION else "")
    lines = [n for n, _ in records]
    a = [r[0] for _, r in records]
    b = [r[1] for _, r in records]
    n_items = len(records)
    if info.task == pb.CLASSIFICATION:
        check_labels(args.data, lines, b, info.labels)
        lid = {l: i for i, l in enumerate(info.labels)}
        y_true = [lid[l] for l in b]
    elif n_items < 2:
        raise ProfileError("--data: retrieval needs at least 2 query/document pairs, '%s' has %d" % (args.data, n_items))

    allowed = [pb.Solver.Name(s) for s in info.solvers] or ["EULER"]
    solvers = parse_solvers(args.solvers, allowed)
    steps = parse_steps(args.steps, info.min_steps, info.max_steps) if args.steps else \
        list(range(info.min_steps, info.max_steps + 1))
    if not steps:
        raise ProfileError("the model's step range [%d, %d] is empty" % (info.min_steps, info.max_steps))
    tolerance, tolerance_how = resolve_tolerance(args.quality_tolerance, n_items)
    per = max(1, info.max_inputs_per_request or 32)
    calls_per_point = math.ceil(n_items / per) * (1 if info.task == pb.CLASSIFICATION else 2)
    dataset = dataset_name(args.data, n_items)

    src = " from %s" % info.default_steps_source if getattr(info, "default_steps_source", "") else ""
    print("model %s (%s, version %s): steps %d-%d (default %d%s), trained depth %d, solvers %s, %d inputs per call" % (
        info.name, task, info.version or "-", info.min_steps, info.max_steps, info.default_steps, src,
        info.trained_depth, ", ".join(allowed), per))
    print("data %s: %d %s%s; measuring %s at steps %s: %d points x %d call(s)" % (
        args.data, n_items, "labelled texts" if info.task == pb.CLASSIFICATION else "query/document pairs",
        " (--limit %d)" % args.limit if args.limit else "", ", ".join(solvers), _steps_spec(steps),
        len(solvers) * len(steps), calls_per_point), flush=True)

    progress = Progress(calls_per_point * len(solvers) * len(steps), len(solvers) * len(steps), "profiling %s" % info.name)
    meas = Measurer(pb, stub, info.name, per, args.timeout, metadata, not args.no_truncate, progress)
    measured, seconds = [], {}
    try:
        for solver in solvers:
            for n in steps:
                t0 = time.time()
                if info.task == pb.CLASSIFICATION:
                    pred = meas.classify(a, solver, n)
                    values = classification_metrics(y_true, [lid[l] for l in pred], len(info.labels))
                else:
                    values = retrieval_metrics(meas.embed(a, solver, n), meas.embed(b, solver, n))
                seconds[(solver, n)] = time.time() - t0
                measured.append((solver, n, values))
                progress.point("%s x %d: %s %.4f" % (solver, n, primary, values[primary]))
    except grpc.RpcError as e:
        progress.close()
        sys.stderr.write("profile: %s call failed at %s x %d: %s: %s\n" % (
            "Classify" if info.task == pb.CLASSIFICATION else "Embed", solver, n, e.code().name, e.details()))
        return 1
    except RuntimeError as e:  # the server ran other steps or another solver than asked
        progress.close()
        sys.stderr.write("profile: %s\n" % e)
        return 1
    progress.close()

    points = make_points(measured, metrics, dataset)
    text = profile_text(profile_message(primary, points))
    points = points_of(parse_profile_text(text))  # the values exactly as written
    rec = recommend_default(points, primary, tolerance)

    print()
    print("%s on %s, %s primary; seconds = wall time of the point's calls" % (info.name, dataset, primary))
    print(format_table(points, metrics, solvers, steps, seconds, rec))
    if meas.truncated:
        print("note: %d input(s) were cut to the model's max_sequence_length (%d tokens) in the calls above" % (
            meas.truncated // max(1, len(solvers) * len(steps)), info.max_sequence_length))
    if info.task == pb.EMBEDDING and n_items <= 10:
        print("note: with %d documents, recall@10 is 1 at every point" % n_items)
    print(depth_gain(points, primary, info.trained_depth))
    if rec is None:
        print("recommended default_steps: none (no EULER points measured; the server's default follows Euler points)")
    else:
        print("quality tolerance: %.6g (%s)" % (tolerance, tolerance_how))
        print("recommended default_steps: %d (EULER, %s %.4f; best %.4f at %s, tolerance %.6g, inclusive)" % (
            rec["steps"], primary, rec["value"], rec["best_value"], _n_steps(rec["best_steps"]), tolerance))
        if steps != list(range(info.min_steps, info.max_steps + 1)):
            print("note: chosen among the measured steps (%s) only; the model allows %d-%d" % (
                _steps_spec(steps), info.min_steps, info.max_steps))

    if out_path:
        _write_atomically(out_path, text)
        print("wrote %s (%d points)" % (out_path, len(points)))
    if args.apply:
        if rec is None:
            raise ProfileError("--apply: no EULER points measured, so the server would have no default to follow; "
                               "include EULER in --solvers")
        r = apply_to_model_dir(args.apply, info.name, text, tolerance)
        print("applied to %s: wrote quality.pbtxt; config.pbtxt now has quality_profile_file: \"quality.pbtxt\", "
              "quality_tolerance: %r%s" % (
                  args.apply, tolerance,
                  ", and no default_steps (was %d): the server follows the profile" % r["previous_default_steps"]
                  if r["previous_default_steps"] else " and no default_steps: the server follows the profile"))
        if r["comments_dropped"]:
            print("note: config.pbtxt was rewritten from its parsed form; its comments were not kept")
        print("restart the server to use it (model folders are read at start-up): calls that name neither steps "
              "nor a budget then run %s, and budgeted calls choose from the new profile" % _n_steps(rec["steps"], "Euler "))
    elif rec is not None:
        print("to apply: rerun with --apply MODEL_DIR, or set quality_profile_file: \"quality.pbtxt\", "
              "quality_tolerance: %r and remove default_steps in the model's config.pbtxt, then restart the server" % tolerance)
    return 0


def _log_tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            tail = f.read().splitlines()[-lines:]
    except OSError:
        return ""
    return "\nlast lines of the server log (%s):\n  %s" % (path, "\n  ".join(tail)) if tail else ""


def _n_steps(n: int, kind: str = "") -> str:
    return "%d %sstep%s" % (n, kind, "" if n == 1 else "s")


def _steps_spec(steps: Sequence[int]) -> str:
    """[1, 2, 3, 5, 8] -> "1-3,5,8"."""
    out, i = [], 0
    while i < len(steps):
        j = i
        while j + 1 < len(steps) and steps[j + 1] == steps[j] + 1:
            j += 1
        out.append(str(steps[i]) if i == j else "%d-%d" % (steps[i], steps[j]))
        i = j + 1
    return ",".join(out)
