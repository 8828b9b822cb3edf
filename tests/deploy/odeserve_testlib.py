#!/usr/bin/env python3
"""Small, dependency-light helpers to drive a real odeserve from tests and scripts.

Only python3-grpcio is needed: requests are encoded and responses decoded by hand on the
protobuf wire format (the messages used here are tiny), so no generated Python code and no
grpcio-tools. Used by tests/deploy, tests/interop and docker/build-check.sh.

    odeserve_testlib.py smoke --grpc HOST:PORT --metrics URL [--pid PID] [--timeout S]
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request

try:
    import grpc
except ImportError:  # pragma: no cover - reported by callers
    grpc = None

INFERENCE = "odeserve.v1.Inference"
TASK_EMBEDDING, TASK_CLASSIFICATION, TASK_TRANSLATION = 1, 2, 3
STATE_READY = 2
HEALTH_SERVING, HEALTH_NOT_SERVING = 1, 2


# ------------------------------------------------------------------------------ wire format
def _varint(v: int) -> bytes:
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def f_varint(num: int, v: int) -> bytes:
    return _varint(num << 3) + _varint(v) if v else b""


def f_bytes(num: int, data: bytes) -> bytes:
    return _varint((num << 3) | 2) + _varint(len(data)) + data


def f_str(num: int, s: str) -> bytes:
    return f_bytes(num, s.encode("utf-8")) if s else b""


def decode(buf: bytes) -> dict[int, list]:
    """Decodes one message level: field number -> list of ints (varint/fixed) or bytes."""
    out: dict[int, list] = {}
    i, n = 0, len(buf)
    while i < n:
        key, i = _read_varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _read_varint(buf, i)
        elif wt == 1:
            v = struct.unpack_from("<Q", buf, i)[0]
            i += 8
        elif wt == 2:
            ln, i = _read_varint(buf, i)
            v = buf[i:i + ln]
            i += ln
        elif wt == 5:
            v = struct.unpack_from("<I", buf, i)[0]
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        out.setdefault(num, []).append(v)
    return out


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = v = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def compute_options(steps: int = 0, budget_s: float | None = None, refuse: bool = False) -> bytes:
    msg = f_varint(1, steps)
    if budget_s is not None:
        secs = int(budget_s)
        nanos = int(round((budget_s - secs) * 1e9))
        msg += f_bytes(2, f_varint(1, secs) + f_varint(2, nanos))
    if refuse:
        msg += f_varint(5, 2)  # BudgetMissPolicy.REFUSE
    return msg


def embed_request(model: str, inputs: list[str], compute: bytes = b"", normalize=False) -> bytes:
    return (f_str(1, model) + b"".join(f_str(2, s) for s in inputs)
            + (f_bytes(3, compute) if compute else b"") + f_varint(4, int(normalize)))


def classify_request(model: str, inputs: list[str], top_k: int = 1, compute: bytes = b"") -> bytes:
    return (f_str(1, model) + b"".join(f_str(2, s) for s in inputs)
            + (f_bytes(3, compute) if compute else b"") + f_varint(4, top_k))


# ------------------------------------------------------------------------------------- gRPC
class Client:
    def __init__(self, target: str, token: str | None = None):
        if grpc is None:
            raise RuntimeError("python3-grpcio is not installed (docker/install-deps.sh)")
        self.channel = grpc.insecure_channel(target)
        self.metadata = [("authorization", f"Bearer {token}")] if token else None

    def call(self, method: str, request: bytes, timeout: float = 60.0):
        """Returns (grpc.StatusCode, response bytes or None, details)."""
        fn = self.channel.unary_unary(method)
        try:
            resp = fn(request, timeout=timeout, metadata=self.metadata)
            return grpc.StatusCode.OK, resp, ""
        except grpc.RpcError as e:  # noqa: PERF203
            return e.code(), None, e.details()

    def inference(self, rpc: str, request: bytes, timeout: float = 60.0):
        return self.call(f"/{INFERENCE}/{rpc}", request, timeout)

    def health(self, service: str = "", timeout: float = 2.0) -> int | None:
        code, resp, _ = self.call("/grpc.health.v1.Health/Check", f_str(1, service), timeout)
        if code != grpc.StatusCode.OK:
            return None
        return decode(resp).get(1, [0])[0]

    def list_models(self) -> list[dict]:
        code, resp, details = self.inference("ListModels", b"")
        if code != grpc.StatusCode.OK:
            raise RuntimeError(f"ListModels: {code} {details}")
        models = []
        for raw in decode(resp).get(1, []):
            m = decode(raw)
            models.append({
                "name": m.get(1, [b""])[0].decode(),
                "task": m.get(2, [0])[0],
                "state": m.get(22, [0])[0],
                "min_steps": m.get(11, [0])[0],
                "max_steps": m.get(12, [0])[0],
            })
        return models

    def close(self):
        self.channel.close()


def wait_serving(client: Client, service: str = INFERENCE, timeout: float = 120.0,
                 proc: subprocess.Popen | None = None, pid: int | None = None) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before serving")
        if pid is not None and not _alive(pid):
            raise RuntimeError(f"server pid {pid} exited before serving")
        last = client.health(service)
        if last == HEALTH_SERVING:
            return
        time.sleep(0.2)
    raise TimeoutError(f"health of {service!r} not SERVING after {timeout}s (last: {last})")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# --------------------------------------------------------------------------------- servers
def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Server:
    """Starts the real odeserve binary on free ports; use as a context manager."""

    def __init__(self, binary: str, repository: str | None, extra: list[str] | None = None,
                 log_path: str | None = None):
        self.grpc_port, self.metrics_port = free_ports(2)
        self.args = [binary, f"--grpc_port={self.grpc_port}",
                     f"--metrics_port={self.metrics_port}", "--metrics_address=127.0.0.1",
                     "--device=cpu", "--intra_op_threads=1"]
        if repository:
            self.args.append(f"--model_repository={repository}")
        self.args += extra or []
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def __enter__(self) -> "Server":
        print("starting:", " ".join(self.args), flush=True)
        self._log = open(self.log_path, "w") if self.log_path else subprocess.DEVNULL
        env = dict(os.environ)
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        return self

    def terminate(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log_tail(self, n: int = 40) -> str:
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.log_path:
            self._log.close()


# --------------------------------------------------------------------------------- metrics
def scrape(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_exposition(text: str):
    """Returns (types: family -> type, samples: list of (name, labels-str, float))."""
    types, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, fam, typ = line.split(None, 3)
            types[fam] = typ.strip()
        elif line and not line.startswith("#"):
            m = _SAMPLE.match(line)
            if m:
                samples.append((m.group(1), m.group(2) or "", float(m.group(3))))
    return types, samples


def exercise(client: Client, log=print) -> dict:
    """Makes the calls that should touch every metric family. Returns what ran."""
    models = client.list_models()
    log("models:", ", ".join(f"{m['name']}(task={m['task']},state={m['state']})" for m in models))
    ready = [m for m in models if m["state"] == STATE_READY]
    emb = next((m for m in ready if m["task"] == TASK_EMBEDDING), None)
    cls = next((m for m in ready if m["task"] == TASK_CLASSIFICATION), None)
    done = {"models": models, "embed": emb, "classify": cls, "codes": []}

    def run(rpc, req, want, what):
        code, _, details = client.inference(rpc, req)
        log(f"{what}: {code.name} {details}")
        done["codes"].append((what, code.name))
        if want is not None and code != want:
            raise AssertionError(f"{what}: got {code.name} ({details}), want {want.name}")

    OK = grpc.StatusCode.OK
    text = ["The shared block is integrated with an ODE solver.", "Debian packages are small."]
    if emb:
        run("Embed", embed_request(emb["name"], text), OK, f"Embed {emb['name']}")
        run("Embed", embed_request(emb["name"], text[:1], compute_options(budget_s=5.0)), OK,
            f"Embed {emb['name']} budget 5s")
        run("Embed", embed_request(emb["name"], text[:1], compute_options(budget_s=1e-6, refuse=True)),
            grpc.StatusCode.DEADLINE_EXCEEDED, f"Embed {emb['name']} budget 1us REFUSE")
    if cls:
        run("Classify", classify_request(cls["name"], text, top_k=2), OK, f"Classify {cls['name']}")
    run("Embed", embed_request("no-such-model", text), grpc.StatusCode.NOT_FOUND, "Embed unknown model")
    return done


# ----------------------------------------------------------------------------------- smoke
def smoke(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="odeserve_testlib.py smoke")
    ap.add_argument("--grpc", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--pid", type=int)
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args(argv)
    c = Client(a.grpc)
    t0 = time.monotonic()
    wait_serving(c, "", a.timeout, pid=a.pid)
    wait_serving(c, INFERENCE, a.timeout, pid=a.pid)
    print(f"smoke: health '' and {INFERENCE} SERVING after {time.monotonic() - t0:.1f}s")
    ex = exercise(c, log=lambda *x: print("smoke:", *x))
    if not ex["embed"]:
        print("smoke: FAIL: no READY embedding model in the default repository")
        return 1
    text = scrape(a.metrics)
    types, samples = parse_exposition(text)
    names = {s[0] for s in samples}
    need = ["odeserve_requests_total", "odeserve_request_duration_seconds_bucket",
            "odeserve_model_info", "odeserve_build_info"]
    missing = [n for n in need if n not in names]
    print(f"smoke: /metrics has {len(types)} families, {len(samples)} samples; missing: {missing}")
    for s in samples:
        if s[0] in ("odeserve_model_info", "odeserve_build_info"):
            print("smoke:", s[0] + s[1])
    return 1 if missing else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "smoke":
        sys.exit(smoke(sys.argv[2:]))
    print(__doc__)
    sys.exit(2)
