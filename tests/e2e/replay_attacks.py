#!/usr/bin/python3
"""Replays the eight hostile-client attacks of issue 42 against the real odeserve binary and
measures whether the server keeps serving.

    /usr/bin/python3 tests/e2e/replay_attacks.py --build build --repository models/repository \
        [--scale full|small] [--only 1,2,...] [--out report.json] [--workdir DIR]

Each attack gets a fresh server (gRPC and /metrics on port 0 of 127.0.0.1, ports read from
--port_file, its stdout+stderr in WORKDIR/<name>.log) and a health prober: a separate process
holding one gRPC channel open for the whole run, calling grpc.health.v1.Health/Check (service
"") every ~20 ms with a 1 s deadline and recording every latency and every failure (a failure is
any answer other than SERVING, including the deadline passing). Then the attack runs at the
issue's stated scale (`--scale full`) or a 10x smaller one (`--scale small`, the default), and
after it ends the script polls every 50 ms, for up to 10 s, a normal Embed call (embed-sharebert,
one short text, 1 s deadline) on a fresh channel with a connection of its own.

The attacks (issue 42's numbering; small-scale sizes in brackets):
  1 fds        server under RLIMIT_NOFILE soft=hard=1024; 1,100 [110] idle TCP connections to the
               gRPC port held 5 s, then closed; a fresh channel's health check; whether the
               process exited (a plaintext port is accepted by odeserve, which sheds what it
               cannot hold; only a TLS port's listener check exits 3)
               [small: the limit is lowered with prlimit to the descriptors open + 64 once the
               server is up, so 110 connections still exhaust it, as the C++ test does]
  2 tokenize   one input of '漢' x 64k/128k/256k/1.3M chars [x 1/10], truncate true and false:
               code and wall time of each; two 1.3M-char calls at once; one ~4 MB [400 kB] run of
               'a': the server's peak RSS delta (VmHWM is reset through /proc/PID/clear_refs
               first when the kernel allows it; otherwise it is a high-water mark since start)
  3 cancel     200 [20] Embed calls at the model's largest steps and RK4, each cancelled in the
               same loop iteration that sent it; server-side counts by code and the rows that
               entered a batch (odeserve_batch_size_sum) from /metrics; then a flood of 28,800
               [2,880] such calls while another client makes 8 normal calls (its calls are taken
               out of the server-side figures); then 200 [20] calls all sent first and cancelled
               after (Python's grpc drops most calls cancelled in the same tick before their
               headers leave, so few reach the server; this variant makes more of them arrive)
  4 translate  one Translate of 32 [4] inputs of ~128 tokens, beam 8, 12 + 12 steps, 128 output
               tokens, while a 1-input Embed goes to embed-sharebert every 200 ms; if the call is
               refused by --max_call_work, the largest accepted variant (fewer inputs) runs too
  5 slowloris  100 then 1,000 [10 then 100] stalled /metrics clients (partial request line,
               reconnecting when cut off) while a normal client scrapes every 200 ms (6 s timeout)
  6 sigterm    8 clients send Embed calls back to back; SIGTERM once calls are served; every
               call's final code; 3 runs (both scales)
  7 malformed  2,000 [200] raw requests to /odeserve.v1.Inference/Embed from 4 threads, cycling
               garbage, truncated, a 2^31 length prefix and invalid UTF-8 in `inputs`: codes,
               wall time, libprotobuf lines in the server log, the requests_total counter
  8 port       a second server on the first one's gRPC port (metrics on port 0, so only the gRPC
               clash can stop it): its exit code and message; the first still serves

Reading the results. One line per attack, then a summary table:
  health p50/p99/max ms, fail   the prober's checks that started during the attack window (first
                                request sent .. last answer); `fail` counts non-SERVING answers
                                and errors. Done when: max < 100 ms and fail 0.
  back in                       attack end -> first successful Embed on a fresh channel; `no`
                                when none succeeded within 10 s. Done when: <= 1000 ms.
  verdict                       PASS when both hold and so do the attack's own checks (the JSON's
                                `checks`; e.g. 2: every call under 2 s; 3: no cancelled call
                                computed and counted OK (rows of cancelled calls that entered a
                                batch are reported, not judged); 5: scrapes under 100 ms; 6: no
                                CANCELLED; 7: all INVALID_ARGUMENT, counted, log rate-limited; 8:
                                the second server refused to start); the failed checks are named.
                                6 has no "back in" (n/a).
The JSON report (--out) holds every figure, the server logs' paths and each check. Timings on a
loaded or small machine are the machine's as much as the server's: compare against a baseline
run on the same machine. Every call has a deadline, every wait a timeout, and each attack a
time limit (--attack_timeout); servers are killed when the script ends, however it ends.
"""
import argparse
import atexit
import json
import math
import os
import re
import resource
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "deploy"))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

import grpc  # noqa: E402

import odeserve_testlib as testlib  # noqa: E402

EMBED_MODEL = "embed-sharebert"
TRANSLATE_MODEL = "translate-en-de"
SHORT_TEXT = "a fast and lightweight web server"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
EMBED_METHOD = "/odeserve.v1.Inference/Embed"
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]  # channels to one address otherwise share one

SCALES = {
    "full": dict(fd_connections=1100, han_chars=[65536, 131072, 262144, 1300000], pair_chars=1300000,
                 a_chars=4000000, cancel_calls=200, flood_calls=28800, translate_inputs=32,
                 stalled=[100, 1000], stall_seconds=10, sigterm_runs=3, bad_requests=2000),
    "small": dict(fd_connections=110, han_chars=[6554, 13107, 26214, 130000], pair_chars=130000,
                  a_chars=400000, cancel_calls=20, flood_calls=2880, translate_inputs=4,
                  stalled=[10, 100], stall_seconds=6, sigterm_runs=3, bad_requests=200),
}


def log(*parts):
    print(time.strftime("%H:%M:%S"), *parts, file=sys.stderr, flush=True)


def now():
    return time.monotonic()  # CLOCK_MONOTONIC: comparable with the prober process's clock


def ms(seconds):
    return None if seconds is None else round(seconds * 1000.0, 2)


def stats_ms(values):
    """p50/p99/max (nearest rank) of latencies in ms."""
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    ordered = sorted(values)

    def rank(p):
        return ordered[min(len(ordered), max(1, math.ceil(p / 100.0 * len(ordered)))) - 1]

    return {"n": len(ordered), "p50": round(rank(50), 2), "p99": round(rank(99), 2), "max": round(ordered[-1], 2),
            "mean": round(statistics.fmean(ordered), 2)}


def count(items):
    out = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return dict(sorted(out.items()))


# ------------------------------------------------------------------------------ clients
def _client_package():
    """odeserve_client and its generated messages (imported late: the first import may generate
    the stubs)."""
    import odeserve_client
    from odeserve_client._proto import inference_pb2, inference_pb2_grpc
    return odeserve_client, inference_pb2, inference_pb2_grpc


class Channel(testlib.Client):
    """testlib's raw-bytes client on a connection of its own."""

    def __init__(self, target):  # noqa: super().__init__ would share the default subchannel pool
        self.channel = grpc.insecure_channel(target, options=OWN_CONNECTION)
        self.metadata = None


def fresh_client(address, timeout=None):
    odeserve_client, _, _ = _client_package()
    return odeserve_client.Client(address, token="", timeout=timeout, options=OWN_CONNECTION)


def timed(fn):
    """Runs fn(); returns (code name, seconds, result or None, message)."""
    odeserve_client, _, _ = _client_package()
    started = now()
    try:
        result = fn()
        return "OK", now() - started, result, ""
    except odeserve_client.OdeserveError as error:
        return error.code.name, now() - started, None, error.message
    except grpc.RpcError as error:
        return error.code().name, now() - started, None, error.details() or ""


def embed_once(address, timeout=1.0, text=SHORT_TEXT):
    with fresh_client(address) as client:
        return timed(lambda: client.embed(text, model=EMBED_MODEL, timeout=timeout))


def time_to_embed(address, since, limit=10.0, interval=0.05):
    """From `since` (the attack's end) until an Embed on a fresh channel succeeds."""
    attempts, last = 0, None
    while True:
        attempts += 1
        code, took, _, message = embed_once(address)
        if code == "OK":
            return {"recovered": True, "ms": ms(now() - since), "attempts": attempts, "last_call_ms": ms(took)}
        last = "%s: %s" % (code, message[:200])
        if now() - since >= limit:
            return {"recovered": False, "ms": None, "attempts": attempts, "last_error": last}
        time.sleep(interval)


def fresh_health(address, timeout=1.0):
    """One health check ("") on a new connection: (status or code name, ms)."""
    channel = Channel(address)
    try:
        started = now()
        code, response, details = channel.call(HEALTH_CHECK, testlib.f_str(1, ""), timeout)
        took = ms(now() - started)
        if code != grpc.StatusCode.OK:
            return {"status": code.name, "ms": took, "details": details}
        serving = testlib.decode(response).get(1, [0])[0] == testlib.HEALTH_SERVING
        return {"status": "SERVING" if serving else "NOT_SERVING", "ms": took}
    finally:
        channel.close()


# ------------------------------------------------------------------------------ metrics
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metric(text, name, **want):
    """Sum of `name` samples whose labels include `want`."""
    _, samples = testlib.parse_exposition(text)
    total = 0.0
    for sample_name, labels, value in samples:
        if sample_name == name and all(dict(_LABEL.findall(labels)).get(k) == v for k, v in want.items()):
            total += value
    return total


def requests_by_code(text, method, model):
    _, samples = testlib.parse_exposition(text)
    out = {}
    for name, labels, value in samples:
        fields = dict(_LABEL.findall(labels))
        if name == "odeserve_requests_total" and fields.get("method") == method and fields.get("model") == model:
            out[fields.get("code", "?")] = int(value)
    return out


def delta(after, before):
    return {k: after.get(k, 0) - before.get(k, 0) for k in sorted(set(after) | set(before))
            if after.get(k, 0) != before.get(k, 0)}


# ------------------------------------------------------------------------------ harness
_live_servers = []


@atexit.register
def _kill_live_servers():
    for server in list(_live_servers):
        server.kill()


class ServerProcess:
    """One odeserve process on 127.0.0.1, ports from --port_file, output in WORKDIR/NAME.log."""

    def __init__(self, args, name, flags=(), nofile=None, grpc_port=0, metrics_port=0):
        self.name = name
        self.port_file = os.path.join(args.workdir, name + ".ports")
        self.log_path = os.path.join(args.workdir, name + ".log")
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        self.argv = [os.path.join(args.build, "server", "odeserve"), "--model_repository", args.repository,
                     "--grpc_address", "127.0.0.1", "--grpc_port", str(grpc_port),
                     "--metrics_address", "127.0.0.1", "--metrics_port", str(metrics_port),
                     "--port_file", self.port_file] + list(args.server_flag) + list(flags)
        self.nofile = nofile
        self.grpc_port = self.metrics_port = None
        self.proc = None
        self._log = None

    def start(self):
        self._log = open(self.log_path, "wb")
        nofile = self.nofile

        def limit_descriptors():
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     preexec_fn=limit_descriptors)
        _live_servers.append(self)
        return self

    def wait_ports(self, timeout):
        """Waits for the port file; False when the process exited first (or the time ran out)."""
        give_up = now() + timeout
        while now() < give_up:
            if os.path.exists(self.port_file):
                text = open(self.port_file).read()
                grpc_port = re.search(r"grpc_port=(\d+)", text)
                metrics_port = re.search(r"metrics_port=(-?\d+)", text)
                if grpc_port and metrics_port:
                    self.grpc_port, self.metrics_port = int(grpc_port.group(1)), int(metrics_port.group(1))
                    return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def wait_ready(self, timeout=240.0):
        started = now()
        if not self.wait_ports(timeout):
            raise RuntimeError("%s did not start (exit %s): %s" % (self.name, self.proc.poll(), self.log_tail()))
        client = testlib.Client(self.address)
        try:
            testlib.wait_serving(client, testlib.INFERENCE, timeout - (now() - started), proc=self.proc)
        finally:
            client.close()
        log("%s ready on %s (pid %d) after %.1f s" % (self.name, self.address, self.pid, now() - started))
        return self

    @property
    def address(self):
        return "127.0.0.1:%d" % self.grpc_port

    @property
    def pid(self):
        return self.proc.pid

    @property
    def metrics_url(self):
        return "http://127.0.0.1:%d/metrics" % self.metrics_port

    def scrape(self, timeout=5.0):
        return testlib.scrape(self.metrics_url, timeout=timeout)

    def status_kib(self, field):
        """A field of /proc/PID/status in KiB (VmRSS, VmHWM), or None once the process is gone."""
        try:
            with open("/proc/%d/status" % self.pid) as f:
                found = re.search(r"^%s:\s+(\d+) kB" % field, f.read(), re.M)
            return int(found.group(1)) if found else None
        except OSError:
            return None

    def reset_peak_rss(self):
        """Resets VmHWM to the current RSS (Linux >= 4.0); False where not allowed."""
        try:
            with open("/proc/%d/clear_refs" % self.pid, "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def open_descriptors(self):
        try:
            return len(os.listdir("/proc/%d/fd" % self.pid))
        except OSError:
            return None

    def log_size(self):
        self._log.flush()
        return os.path.getsize(self.log_path)

    def log_text(self, offset=0):
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")

    def log_tail(self, lines=20):
        return "".join(self.log_text().splitlines(True)[-lines:])

    def wait_exit(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout=30.0):
        """SIGTERM, then SIGKILL after `timeout`; the exit code (negative: killed by that signal)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if self.wait_exit(timeout) is None:
                self.proc.kill()
                self.proc.wait(10)
        self._close()
        return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self._close()

    def _close(self):
        if self in _live_servers:
            _live_servers.remove(self)
        if self._log is not None:
            self._log.close()
            self._log = None


class HealthProber:
    """grpc.health.v1 Check ("") every ~20 ms with a 1 s deadline, on one channel kept open, in a
    process of its own (the attack's threads in this process would otherwise add their GIL time
    to its latencies). Each check is a line `start_monotonic latency_ms status` in a file."""

    def __init__(self, address, path, interval=0.02, deadline=1.0):
        self.path = path
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "_probe", address, path,
                                      str(interval), str(deadline)], stdin=subprocess.DEVNULL)
        give_up = now() + 20
        while now() < give_up and self.proc.poll() is None:
            if os.path.exists(path):
                with open(path) as f:
                    if f.read(6) == "ready\n":
                        return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("the health prober did not connect to " + address)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def samples(self):
        out = []
        with open(self.path) as f:
            for line in f:
                fields = line.split()
                if len(fields) == 3:
                    out.append((float(fields[0]), float(fields[1]), fields[2]))
        return out

    def window(self, start=None, end=None):
        """Checks that started in [start, end]: latency stats of those answered SERVING, failures."""
        picked = [s for s in self.samples() if (start is None or s[0] >= start) and (end is None or s[0] <= end)]
        served = [latency for _, latency, status in picked if status == "SERVING"]
        failed = [status for _, _, status in picked if status != "SERVING"]
        result = stats_ms(served)
        result.update(checks=len(picked), failures=len(failed), failure_codes=count(failed),
                      over_100ms=sum(1 for v in served if v > 100.0))
        return result


def probe_main(address, path, interval, deadline):
    """The prober process (see HealthProber)."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    parent = os.getppid()
    channel = testlib.Client(address)
    grpc.channel_ready_future(channel.channel).result(timeout=15)
    request = testlib.f_str(1, "")
    with open(path, "w") as out:
        out.write("ready\n")
        out.flush()
        while not stopping.is_set() and os.getppid() == parent:
            started = now()
            code, response, _ = channel.call(HEALTH_CHECK, request, deadline)
            took = now() - started
            if code != grpc.StatusCode.OK:
                status = code.name
            else:
                value = testlib.decode(response).get(1, [0])[0]
                status = "SERVING" if value == testlib.HEALTH_SERVING else "STATUS_%d" % value
            out.write("%.6f %.3f %s\n" % (started, took * 1000.0, status))
            out.flush()
            stopping.wait(interval)
    channel.close()


class Run:
    """One attack's server and health prober, with the attack window and the recovery check."""

    def __init__(self, args, name, flags=(), nofile=None):
        self.args, self.name = args, name
        self.server = ServerProcess(args, name, flags, nofile=nofile)
        self.prober = None
        self.attack_start = self.attack_end = None
        self.exit_code = None

    def __enter__(self):
        self.server.start().wait_ready()
        self.prober = HealthProber(self.server.address, os.path.join(self.args.workdir, self.name + ".health"))
        return self

    def __exit__(self, *exc):
        if self.prober is not None:
            self.prober.stop()
        self.exit_code = self.server.stop()
        return False

    def begin(self):
        self.attack_start = now()

    def end(self):
        self.attack_end = now()

    def recovery(self):
        return time_to_embed(self.server.address, self.attack_end)

    def health(self):
        return {"attack": self.prober.window(self.attack_start, self.attack_end),
                "whole": self.prober.window()}

    def server_info(self):
        return {"argv": self.server.argv, "pid": self.server.pid, "log": self.server.log_path,
                "exit_code": self.server.proc.poll()}


def standard_checks(result, health_key="attack"):
    health = result["health"][health_key]
    result.setdefault("checks", {})
    result["checks"]["health_within_100ms"] = bool(health["checks"]) and health["failures"] == 0 and \
        (health["max"] is not None and health["max"] < 100.0)
    recovery = result.get("recovery")
    if recovery is not None:
        result["checks"]["serving_within_1s"] = bool(recovery["recovered"] and recovery["ms"] <= 1000.0)


# ------------------------------------------------------------------------------ 1: descriptors
def attack_fds(args, scale):
    """Idle TCP connections past RLIMIT_NOFILE, held 5 s, then closed."""
    result = {"connections": scale["fd_connections"], "hold_s": 5.0}
    with Run(args, "1-fds", nofile=1024) as run:
        server = run.server
        result["fds_open_at_start"] = server.open_descriptors()
        if args.scale == "small":  # keep the attack meaningful at a tenth of the connections
            limit = server.open_descriptors() + 64
            resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (limit, limit))
            result["nofile"] = {"soft": limit, "hard": limit, "how": "prlimit after start (descriptors open + 64)"}
        else:
            result["nofile"] = {"soft": 1024, "hard": 1024, "how": "setrlimit before exec"}
        log_offset = server.log_size()
        sockets, failed = [], []
        run.begin()
        for _ in range(scale["fd_connections"]):
            try:
                sockets.append(socket.create_connection(("127.0.0.1", server.grpc_port), timeout=2.0))
            except OSError as error:
                failed.append(type(error).__name__)
        result["connected"], result["connect_failures"] = len(sockets), count(failed)
        time.sleep(2.5)
        result["health_fresh_channel_while_held"] = fresh_health(server.address)
        result["server_fds_while_held"] = server.open_descriptors()
        time.sleep(2.5)
        for s in sockets:
            s.close()
        run.end()
        result["health_fresh_channel_after"] = fresh_health(server.address)
        result["recovery"] = run.recovery()
        # Not served again: does it recover later, or exit (3, by design) for a supervisor?
        interval = 5.0
        give_up = now() + 3 * interval + 30.0
        result["later"] = None
        if not result["recovery"]["recovered"]:
            while now() < give_up:
                if server.proc.poll() is not None:
                    result["later"] = {"exited": True, "exit_code": server.proc.returncode,
                                       "s_after_attack": round(now() - run.attack_end, 2)}
                    break
                if fresh_health(server.address)["status"] == "SERVING":
                    result["later"] = {"exited": False, "serving_again_s_after_attack": round(now() - run.attack_end, 2)}
                    break
                time.sleep(1.0)
        time.sleep(0.5)
        result["exited"] = server.proc.poll() is not None
        result["exit_code"] = server.proc.poll()
        result["exit_3_is_the_designed_defence"] = result["exit_code"] == 3  # docs/LIMITS.md: for a supervisor
        result["log_lines"] = [line for line in server.log_text(log_offset).splitlines()
                               if re.search(r"open files|Too many|accept|listener|NOT_SERVING|exit", line, re.I)][:20]
        result["health"] = run.health()
        result["server"] = run.server_info()
    standard_checks(result)
    later = result["later"]
    result["line"] = "%d/%d connected; fresh health after: %s; %s" % (
        result["connected"], scale["fd_connections"], result["health_fresh_channel_after"]["status"],
        "exited %s" % result["exit_code"] if result["exited"] else "still running") + (
        "; later: %s" % json.dumps(later) if later else "")
    return result


# ------------------------------------------------------------------------------ 2: tokenization
def attack_tokenize(args, scale):
    """Runs of one character the tokenizer does not know, and a long run of 'a'."""
    result = {"calls": []}
    with Run(args, "2-tokenize") as run:
        server = run.server
        address = server.address

        def call(text, truncate, label, timeout=60.0):
            with fresh_client(address) as client:
                code, took, response, message = timed(
                    lambda: client.embed(text, model=EMBED_MODEL, truncate=truncate, timeout=timeout))
            entry = {"what": label, "bytes": len(text.encode("utf-8")), "truncate": truncate, "code": code,
                     "ms": ms(took), "message": message[:300]}
            if response is not None:
                entry.update(tokens=response.report.tokens, truncated_inputs=response.report.truncated_inputs)
            log("  2: %-22s truncate=%-5s %-18s %8.1f ms" % (label, truncate, code, entry["ms"]))
            return entry

        run.begin()
        # The long run of 'a' first, with the peak RSS reset, so earlier calls cannot mask it.
        reset = server.reset_peak_rss()
        before = {"VmHWM_kib": server.status_kib("VmHWM"), "VmRSS_kib": server.status_kib("VmRSS")}
        a_call = call("a" * scale["a_chars"], True, "'a' x %d" % scale["a_chars"])
        after = {"VmHWM_kib": server.status_kib("VmHWM"), "VmRSS_kib": server.status_kib("VmRSS")}
        result["a_run"] = {"call": a_call, "peak_rss_reset": reset, "before": before, "after": after,
                           "peak_rss_delta_mib": round((after["VmHWM_kib"] - before["VmHWM_kib"]) / 1024.0, 1)
                           if after["VmHWM_kib"] and before["VmHWM_kib"] else None}
        for chars in scale["han_chars"]:
            for truncate in (True, False):
                result["calls"].append(call("漢" * chars, truncate, "'漢' x %d" % chars))
        # Two of the largest at once.
        pair = [None, None]
        big = "漢" * scale["pair_chars"]

        def one(i):
            pair[i] = call(big, True, "pair[%d] '漢' x %d" % (i, scale["pair_chars"]))

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(2)]
        started = now()
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        result["pair"] = {"calls": pair, "wall_ms": ms(now() - started)}
        run.end()
        result["recovery"] = run.recovery()
        result["health"] = run.health()
        result["server"] = run.server_info()
    standard_checks(result)
    worst = max([c["ms"] for c in result["calls"]] + [c["ms"] for c in pair if c] + [a_call["ms"]])
    result["checks"]["every_call_under_2s"] = worst < 2000.0
    result["line"] = "slowest call %.0f ms; pair %.0f ms; 'a' run %s %.0f ms, peak RSS +%s MiB" % (
        worst, result["pair"]["wall_ms"], a_call["code"], a_call["ms"], result["a_run"]["peak_rss_delta_mib"])
    return result


# ------------------------------------------------------------------------------ 3: cancelled calls
def wait_model_idle(server, model, timeout=30.0):
    """Until the model has no call in flight and its counters stopped moving; the last page."""
    give_up, last = now() + timeout, None
    while now() < give_up:
        page = server.scrape()
        in_flight = metric(page, "odeserve_requests_in_flight", model=model)
        counts = requests_by_code(page, "Embed", model)
        if in_flight == 0 and counts == last:
            return page
        last = counts
        time.sleep(0.3)
    return server.scrape()


def server_work(page, model):
    """Counters of the compute a model's batches did."""
    return {"rows": metric(page, "odeserve_batch_size_sum", model=model),
            "batches": metric(page, "odeserve_batch_size_count", model=model),
            "joined_rows": metric(page, "odeserve_joined_rows_total", model=model),
            "input_tokens": metric(page, "odeserve_input_tokens_total", model=model),
            "compute_seconds_sum": metric(page, "odeserve_compute_duration_seconds_sum", model=model)}


def send_cancelled(stub, request, n, sent_counter=None, same_tick=True):
    """n calls, each cancelled in the loop iteration that sent it (same_tick), or all sent first
    and then cancelled; client-side outcomes."""
    futures, not_cancelled = [], 0
    for i in range(n):
        future = stub.Embed.future(request, timeout=30.0)
        if same_tick and not future.cancel():
            not_cancelled += 1
        futures.append(future)
        if sent_counter is not None:
            sent_counter[0] = i + 1
    if not same_tick:
        not_cancelled = sum(1 for future in futures if not future.cancel())
    codes = []
    for future in futures:
        try:
            future.result(timeout=30.0)
            codes.append("OK")
        except grpc.FutureCancelledError:
            codes.append("CANCELLED")
        except grpc.RpcError as error:
            codes.append(error.code().name)
        except grpc.FutureTimeoutError:
            codes.append("CLIENT_TIMEOUT")
    return {"client_codes": count(codes), "cancel_returned_false": not_cancelled}


def attack_cancel(args, scale):
    """Calls cancelled the moment they are sent: never computed, never counted OK."""
    _, pb, pb_grpc = _client_package()
    result = {}
    with Run(args, "3-cancel") as run:
        server = run.server
        with fresh_client(server.address) as client:
            info = client.model(EMBED_MODEL, timeout=10)
        solver = "RK4" if "RK4" in info.solvers else info.solvers[-1]
        request = pb.EmbedRequest(model=EMBED_MODEL, inputs=["cancelled as soon as it was sent: " + SHORT_TEXT])
        request.compute.steps = info.max_steps
        request.compute.solver = pb.Solver.Value(solver)
        result["request"] = {"steps": info.max_steps, "solver": solver}
        channel = grpc.insecure_channel(server.address, options=OWN_CONNECTION)
        stub = pb_grpc.InferenceStub(channel)
        grpc.channel_ready_future(channel).result(timeout=10)

        def phase(n, normal_calls=0, same_tick=True):
            page = server.scrape()
            before = requests_by_code(page, "Embed", EMBED_MODEL)
            work_before = server_work(page, EMBED_MODEL)
            sent, normal = [0], []

            def normal_client():
                while sent[0] < n // 10 and now() < give_up:
                    time.sleep(0.001)
                with fresh_client(server.address) as c:
                    for _ in range(normal_calls):
                        code, took, _, message = timed(lambda: c.embed(SHORT_TEXT, model=EMBED_MODEL, timeout=10))
                        normal.append({"code": code, "ms": ms(took), "during_flood": sent[0] < n,
                                       "message": message[:200]})

            give_up = now() + 120
            other = threading.Thread(target=normal_client, daemon=True)
            if normal_calls:
                other.start()
            started = now()
            out = send_cancelled(stub, request, n, sent, same_tick)
            out["send_ms"] = ms(now() - started)
            if normal_calls:
                other.join(120)
            page = wait_model_idle(server, EMBED_MODEL)
            # The server counts the normal client's calls too (same model): take them out.
            out["server_codes"] = delta(delta(requests_by_code(page, "Embed", EMBED_MODEL), before),
                                        count(c["code"] for c in normal))
            work = server_work(page, EMBED_MODEL)
            out["server_work"] = {k: round(work[k] - work_before[k], 6) for k in work}
            out["normal_calls"] = normal
            out["normal_ok"] = sum(1 for c in normal if c["code"] == "OK")
            # Rows that entered a batch, less the normal client's (one input per served call).
            out["rows_of_cancelled_calls"] = int(out["server_work"]["rows"]) - out["normal_ok"]
            return out

        run.begin()
        result["cancelled"] = phase(scale["cancel_calls"])
        log("  3: %d cancelled: server %s" % (scale["cancel_calls"], result["cancelled"]["server_codes"]))
        result["flood"] = phase(scale["flood_calls"], normal_calls=8)
        log("  3: flood of %d: server %s; normal %d/8 OK" % (scale["flood_calls"], result["flood"]["server_codes"],
                                                              result["flood"]["normal_ok"]))
        # Python's grpc drops most calls cancelled in the same tick before their headers leave;
        # for comparison, the same calls all sent first and then cancelled (informational: the
        # first of them may legitimately finish before their cancellation arrives).
        result["cancelled_after_all_sent"] = phase(scale["cancel_calls"], same_tick=False)
        log("  3: %d sent, then cancelled: server %s" % (scale["cancel_calls"],
                                                          result["cancelled_after_all_sent"]["server_codes"]))
        run.end()
        channel.close()
        result["recovery"] = run.recovery()
        result["health"] = run.health()
        result["server"] = run.server_info()
    standard_checks(result)
    ok_computed = result["cancelled"]["server_codes"].get("OK", 0) + result["flood"]["server_codes"].get("OK", 0)
    result["checks"]["no_cancelled_call_computed_ok"] = ok_computed == 0
    result["checks"]["normal_calls_all_ok"] = result["flood"]["normal_ok"] == 8
    result["line"] = "%d cancelled -> server %s, rows %d; flood %d -> server %s, rows %d; normal %d/8 OK; " \
        "sent-then-cancelled -> server %s, rows %d" % (
            scale["cancel_calls"], result["cancelled"]["server_codes"], result["cancelled"]["rows_of_cancelled_calls"],
            scale["flood_calls"], result["flood"]["server_codes"], result["flood"]["rows_of_cancelled_calls"],
            result["flood"]["normal_ok"], result["cancelled_after_all_sent"]["server_codes"],
            result["cancelled_after_all_sent"]["rows_of_cancelled_calls"])
    return result


# ------------------------------------------------------------------------------ 4: one long call
DESCRIPTION = ("This package contains the development files for the GNU C library, including the headers and "
               "static libraries needed to compile programs that use it. It also provides a fast and "
               "lightweight web server with support for virtual hosts, TLS and HTTP/2, a tool to compress "
               "files with a high ratio, and documentation in HTML format for the command line interface. ")


def attack_translate(args, scale):
    """One legal Translate call that costs tens of seconds, beside short calls to another model."""
    result = {"attempts": []}
    text = (DESCRIPTION * 3)[:900]  # cut to 128 tokens by truncate=true
    timeout = 300.0 if args.scale == "full" else 180.0
    with Run(args, "4-translate") as run:
        address = run.server.address

        def translate_with_embeds(inputs):
            stop, embeds = threading.Event(), []

            def embedder():
                with fresh_client(address) as c:
                    while not stop.is_set():
                        started = now()
                        code, took, _, _ = timed(lambda: c.embed(SHORT_TEXT, model=EMBED_MODEL, timeout=30))
                        embeds.append((code, took * 1000.0))
                        stop.wait(max(0.0, 0.2 - (now() - started)))

            other = threading.Thread(target=embedder, daemon=True)
            other.start()
            with fresh_client(address) as c:
                code, took, response, message = timed(lambda: c.translate(
                    [text] * inputs, model=TRANSLATE_MODEL, beam_size=8, steps=12, decoder_steps=12,
                    max_output_tokens=128, truncate=True, timeout=timeout))
            stop.set()
            other.join(35)
            entry = {"inputs": inputs, "code": code, "ms": ms(took), "message": message[:400],
                     "embeds": dict(stats_ms([v for c, v in embeds if c == "OK"]),
                                    codes=count(c for c, _ in embeds))}
            if response is not None:
                entry["report"] = {"tokens": response.report.tokens, "output_tokens": response.report.output_tokens,
                                   "steps": response.report.steps, "decoder_steps": response.report.decoder_steps,
                                   "beam_size": response.report.beam_size}
            log("  4: %d inputs: %s in %.0f ms; embeds %s" % (inputs, code, entry["ms"], entry["embeds"]))
            return entry

        run.begin()
        inputs = scale["translate_inputs"]
        while inputs >= 1:
            entry = translate_with_embeds(inputs)
            result["attempts"].append(entry)
            if not (entry["code"] == "INVALID_ARGUMENT" and "max_call_work" in entry["message"]):
                break
            inputs = inputs * 3 // 4 if inputs > 4 else inputs - 1
        run.end()
        result["recovery"] = run.recovery()
        result["health"] = run.health()
        result["server"] = run.server_info()
    standard_checks(result)
    stated, ran = result["attempts"][0], result["attempts"][-1]
    result["stated_call"], result["largest_accepted"] = stated, (ran if ran["code"] != "INVALID_ARGUMENT" else None)
    result["checks"]["embeds_ok_during_translate"] = all(
        set(a["embeds"]["codes"]) <= {"OK"} for a in result["attempts"])
    result["line"] = "%d inputs: %s %.0f ms%s; embeds during it p50 %s max %s ms %s" % (
        stated["inputs"], stated["code"], stated["ms"],
        "" if ran is stated else "; %d inputs: %s %.0f ms" % (ran["inputs"], ran["code"], ran["ms"]),
        ran["embeds"]["p50"], ran["embeds"]["max"], ran["embeds"]["codes"])
    return result


# ------------------------------------------------------------------------------ 5: slowloris
class StalledClients:
    """n connections to an HTTP port that send a partial request line and nothing more; each one
    the server closes (or that fails) is replaced at once. One thread, non-blocking sockets."""

    PARTIAL = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: stalled"

    def __init__(self, port, n):
        self.port, self.n = port, n
        self.selector = selectors.DefaultSelector()
        self.stats = {"connects": 0, "connect_failures": 0, "connect_timeouts": 0, "closed_by_server": 0,
                      "max_open": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self):
        for _ in range(self.n):
            self._open()
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(10)
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()
        self.selector.close()

    def _open(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        error = s.connect_ex(("127.0.0.1", self.port))
        if error not in (0, 115):  # EINPROGRESS
            self.stats["connect_failures"] += 1
            s.close()
            return
        self.selector.register(s, selectors.EVENT_WRITE, ("connecting", now()))

    def _replace(self, s, stat):
        self.stats[stat] += 1
        self.selector.unregister(s)
        s.close()
        if not self._stop.is_set():
            self._open()

    def _loop(self):
        while not self._stop.is_set():
            for key, _ in self.selector.select(0.05):
                s, (state, _) = key.fileobj, key.data
                if state == "connecting":
                    if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                        self._replace(s, "connect_failures")
                        continue
                    try:
                        s.send(self.PARTIAL)
                    except OSError:
                        self._replace(s, "closed_by_server")
                        continue
                    self.stats["connects"] += 1
                    self.selector.modify(s, selectors.EVENT_READ, ("stalled", now()))
                else:
                    try:
                        data = s.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        self._replace(s, "closed_by_server")
            for key in list(self.selector.get_map().values()):  # SYNs the kernel keeps dropping
                if key.data[0] == "connecting" and now() - key.data[1] > 3.0:
                    self._replace(key.fileobj, "connect_timeouts")
            self.stats["max_open"] = max(self.stats["max_open"], len(self.selector.get_map()))


def attack_slowloris(args, scale):
    """Stalled /metrics clients that keep reconnecting, while a normal client scrapes."""
    result = {"levels": []}
    with Run(args, "5-slowloris") as run:
        server = run.server
        run.begin()
        for n in scale["stalled"]:
            stalled = StalledClients(server.metrics_port, n).start()
            time.sleep(0.5)
            latencies, failures, give_up = [], [], now() + scale["stall_seconds"]
            while now() < give_up:
                started = now()
                try:
                    page = testlib.scrape(server.metrics_url, timeout=6.0)
                    if "odeserve_" not in page:
                        raise ValueError("no odeserve_ family in the page")
                    latencies.append((now() - started) * 1000.0)
                except Exception as error:  # noqa: BLE001 - every failure is a data point
                    failures.append(type(error).__name__)
                time.sleep(max(0.0, 0.2 - (now() - started)))
            stalled.stop()
            level = {"stalled_clients": n, "seconds": scale["stall_seconds"], "scrapes": dict(
                stats_ms(latencies), failures=len(failures), failure_kinds=count(failures),
                over_100ms=sum(1 for v in latencies if v > 100.0)), "stalled": stalled.stats}
            log("  5: %d stalled: scrapes %s" % (n, level["scrapes"]))
            result["levels"].append(level)
        run.end()
        result["recovery"] = run.recovery()
        result["health"] = run.health()
        result["server"] = run.server_info()
    standard_checks(result)
    result["checks"]["scrapes_within_100ms"] = all(
        lv["scrapes"]["failures"] == 0 and lv["scrapes"]["max"] is not None and lv["scrapes"]["max"] < 100.0
        for lv in result["levels"])
    result["line"] = "; ".join("%d stalled: scrape p99 %s max %s ms, %d failed" % (
        lv["stalled_clients"], lv["scrapes"]["p99"], lv["scrapes"]["max"], lv["scrapes"]["failures"])
        for lv in result["levels"])
    return result


# ------------------------------------------------------------------------------ 6: SIGTERM
def attack_sigterm(args, scale):
    """Calls in flight and arriving around the exit after SIGTERM: UNAVAILABLE, never CANCELLED."""
    result = {"runs": []}
    for i in range(scale["sigterm_runs"]):
        with Run(args, "6-sigterm-%d" % (i + 1)) as run:
            server = run.server
            stop, lock, calls = threading.Event(), threading.Lock(), []

            def client_loop():
                with fresh_client(server.address) as c:
                    while not stop.is_set():
                        started = now()
                        code, _, _, message = timed(lambda: c.embed(SHORT_TEXT, model=EMBED_MODEL, timeout=10))
                        with lock:
                            calls.append((started, now(), code, message[:160]))

            clients = [threading.Thread(target=client_loop, daemon=True) for _ in range(8)]
            run.begin()
            for t in clients:
                t.start()
            give_up, steady = now() + 10, now() + 1.0  # at least 1 s and 50 calls served first
            while now() < give_up and (now() < steady or sum(1 for c in list(calls) if c[2] == "OK") < 50):
                time.sleep(0.01)
            sigterm = now()
            server.proc.send_signal(signal.SIGTERM)
            exit_code = server.wait_exit(60)
            exited = now()
            time.sleep(0.3)  # calls after the exit too
            stop.set()
            for t in clients:
                t.join(15)
            run.end()
            with lock:
                done = list(calls)
            around = [c for c in done if c[1] >= sigterm]
            entry = {"exit_code": exit_code, "exit_after_sigterm_ms": ms(exited - sigterm),
                     "codes_all": count(c[2] for c in done), "codes_ended_after_sigterm": count(c[2] for c in around),
                     "codes_sent_before_exit_ended_after_sigterm": count(c[2] for c in around if c[0] < exited),
                     "messages": sorted({"%s: %s" % (c[2], c[3]) for c in around if c[2] != "OK"})[:6],
                     "health_before_sigterm": run.prober.window(run.attack_start, sigterm)}
            entry["cancelled"] = entry["codes_all"].get("CANCELLED", 0)
            log("  6: run %d: exit %s, codes %s" % (i + 1, exit_code, entry["codes_all"]))
            result["runs"].append(entry)
            result.setdefault("server", []).append(run.server_info())
    result["health"] = {"attack": _merge_health([r["health_before_sigterm"] for r in result["runs"]])}
    result["recovery"] = None
    standard_checks(result)
    result["checks"]["no_cancelled"] = all(r["cancelled"] == 0 for r in result["runs"])
    result["checks"]["exit_0"] = all(r["exit_code"] == 0 for r in result["runs"])
    result["line"] = "sent before exit, ended after SIGTERM: " + "; ".join(
        "run %d (exit %s in %.0f ms): OK %d UNAVAILABLE %d CANCELLED %d" % (
            i + 1, r["exit_code"], r["exit_after_sigterm_ms"], around.get("OK", 0), around.get("UNAVAILABLE", 0),
            around.get("CANCELLED", 0))
        for i, r in enumerate(result["runs"]) for around in [r["codes_sent_before_exit_ended_after_sigterm"]])
    return result


def _merge_health(windows):
    """The worst of several health windows (for attacks with several servers)."""
    merged = {"checks": sum(w["checks"] for w in windows), "failures": sum(w["failures"] for w in windows),
              "over_100ms": sum(w["over_100ms"] for w in windows)}
    for key in ("p50", "p99", "max"):
        values = [w[key] for w in windows if w[key] is not None]
        merged[key] = max(values) if values else None
    return merged


# ------------------------------------------------------------------------------ 7: malformed
def attack_malformed(args, scale):
    """Requests whose bytes are not a valid EmbedRequest."""
    _, pb, _ = _client_package()
    valid = pb.EmbedRequest(model=EMBED_MODEL, inputs=["a sentence long enough to cut"]).SerializeToString()
    kinds = {
        "garbage": b"\xff\xff\xff\xff\xff",
        "truncated": valid[:-3],
        "length_2^31": bytes([(2 << 3) | 2]) + b"\x80\x80\x80\x80\x08" + b"abc",
        "invalid_utf8": pb.EmbedRequest(model=EMBED_MODEL).SerializeToString() + testlib.f_bytes(2, b"bad \xc3\x28 text"),
    }
    names = list(kinds)
    result = {"requests": scale["bad_requests"]}
    with Run(args, "7-malformed") as run:
        server = run.server
        page = server.scrape()
        before = requests_by_code(page, "Embed", "")
        log_offset = server.log_size()
        outcomes, lock = [], threading.Lock()

        def sender(k):
            channel = Channel(server.address)
            try:
                for i in range(k, scale["bad_requests"], 4):
                    kind = names[i % len(names)]
                    code, _, details = channel.call(EMBED_METHOD, kinds[kind], 10.0)
                    with lock:
                        outcomes.append((kind, code.name, details))
            finally:
                channel.close()

        threads = [threading.Thread(target=sender, args=(k,), daemon=True) for k in range(4)]
        run.begin()
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        run.end()
        result["wall_ms"] = ms(run.attack_end - run.attack_start)
        result["codes"] = count(code for _, code, _ in outcomes)
        result["by_kind"] = {kind: {"codes": count(c for k, c, _ in outcomes if k == kind),
                                    "message": next((d[:300] for k, _, d in outcomes if k == kind), None)}
                             for kind in names}
        result["recovery"] = run.recovery()
        code, took, _, message = embed_once(server.address, timeout=5.0)
        result["normal_embed_after"] = {"code": code, "ms": ms(took), "message": message[:200]}
        time.sleep(0.5)
        text = server.log_text(log_offset)
        result["libprotobuf_log_lines"] = sum(1 for line in text.splitlines() if "libprotobuf" in line)
        result["log_sample"] = [line for line in text.splitlines() if "libprotobuf" in line][:3]
        result["metrics_delta"] = delta(requests_by_code(server.scrape(), "Embed", ""), before)
        result["health"] = run.health()
        result["server"] = run.server_info()
    standard_checks(result)
    counted = result["metrics_delta"].get("INVALID_ARGUMENT", 0)
    result["checks"]["all_invalid_argument"] = result["codes"] == {"INVALID_ARGUMENT": scale["bad_requests"]}
    result["checks"]["counted_in_metrics"] = counted >= scale["bad_requests"]
    result["checks"]["log_rate_limited"] = result["libprotobuf_log_lines"] <= 20
    result["line"] = "codes %s in %.0f ms; %d libprotobuf lines; metrics INVALID_ARGUMENT +%d; embed after %s %.1f ms" % (
        result["codes"], result["wall_ms"], result["libprotobuf_log_lines"], counted,
        result["normal_embed_after"]["code"], result["normal_embed_after"]["ms"])
    return result


# ------------------------------------------------------------------------------ 8: busy port
def attack_port(args, scale):
    """A second server on the gRPC port the first one holds."""
    result = {}
    with Run(args, "8-port") as run:
        first = run.server
        second = ServerProcess(args, "8-port-second", grpc_port=first.grpc_port)
        run.begin()
        second.start()
        started = second.wait_ports(120)
        if started:
            result["second"] = {"started": True, "grpc_port": second.grpc_port,
                                "log_tail": second.log_tail(5).splitlines()}
            second.stop()
        else:
            code = second.wait_exit(60)
            lines = second.log_text().splitlines()
            own = [l for l in lines if re.match(r"\d{4}-\d\d-\d\dT\S+ E ", l)]  # odeserve's own errors
            result["second"] = {"started": False, "exit_code": code,
                                "message": (own or [l for l in lines if re.search(r"listen|in use", l, re.I)]
                                            or lines[-1:] or [""])[-1]}
            if code is None:
                second.kill()
        second.kill()
        run.end()
        result["second"]["ms_to_exit"] = ms(run.attack_end - run.attack_start)
        result["recovery"] = run.recovery()
        result["health"] = run.health()
        result["server"] = run.server_info()
    standard_checks(result)
    second = result["second"]
    result["checks"]["second_refused"] = not second["started"] and second.get("exit_code") not in (None, 0)
    result["line"] = ("second server STARTED on the busy port" if second["started"] else
                      "second server exit %s: %s" % (second["exit_code"], second["message"][-160:]))
    return result


ATTACKS = {
    1: ("fd exhaustion", attack_fds),
    2: ("tokenizer runs", attack_tokenize),
    3: ("cancelled calls", attack_cancel),
    4: ("long translation", attack_translate),
    5: ("metrics slowloris", attack_slowloris),
    6: ("SIGTERM in flight", attack_sigterm),
    7: ("malformed protobuf", attack_malformed),
    8: ("busy gRPC port", attack_port),
}


# ------------------------------------------------------------------------------ driver
class AttackTimeout(Exception):
    pass


def _on_alarm(*_):
    raise AttackTimeout("the attack ran past --attack_timeout")


def verdict(result):
    checks = result.get("checks", {})
    if "error" in result:
        return "ERROR"
    return "PASS" if checks and all(checks.values()) else "FAIL"


def summary_row(number, name, result):
    health = (result.get("health") or {}).get("attack") or {}
    recovery = result.get("recovery")
    back = "n/a" if recovery is None else ("%.0f ms" % recovery["ms"] if recovery.get("recovered") else "no")
    hp = "%s/%s/%s" % (health.get("p50"), health.get("p99"), health.get("max"))
    failed = [k for k, v in result.get("checks", {}).items() if not v]
    return "%d  %-19s %-22s %5s  %-9s %-5s %s" % (
        number, name, hp, health.get("failures", "-"), back, verdict(result),
        ("failed: " + ", ".join(failed)) if failed else "")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", required=True, help="build folder holding server/odeserve")
    parser.add_argument("--repository", required=True, help="model repository (models/repository)")
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--only", default="", help="comma-separated attack numbers (default: all eight)")
    parser.add_argument("--out", help="write the JSON report here")
    parser.add_argument("--workdir", help="server logs and probe files (default: a new temporary folder)")
    parser.add_argument("--attack_timeout", type=float, default=0,
                        help="seconds one attack may take (default: 900 full, 400 small)")
    parser.add_argument("--server_flag", action="append", default=[],
                        help="extra odeserve flag for every server (repeatable), e.g. --server_flag=--intra_op_threads=1")
    args = parser.parse_args(argv)
    args.build, args.repository = os.path.abspath(args.build), os.path.abspath(args.repository)
    args.workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="replay-attacks-"))
    os.makedirs(args.workdir, exist_ok=True)
    if not os.access(os.path.join(args.build, "server", "odeserve"), os.X_OK):
        parser.error("no server binary at %s/server/odeserve" % args.build)
    selected = sorted({int(x) for x in args.only.split(",") if x.strip()}) or sorted(ATTACKS)
    unknown = [n for n in selected if n not in ATTACKS]
    if unknown:
        parser.error("no attack %s (1-8)" % unknown)
    scale = SCALES[args.scale]
    limit = int(args.attack_timeout or (900 if args.scale == "full" else 400))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # this process holds up to ~1,100 sockets
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # atexit kills the servers
    _client_package()  # generate the stubs before any timing

    report = {"scale": args.scale, "sizes": scale, "build": args.build, "repository": args.repository,
              "workdir": args.workdir, "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "attacks": {}}
    log("scale %s, attacks %s, logs in %s" % (args.scale, selected, args.workdir))
    rows = []
    for number in selected:
        name, attack = ATTACKS[number]
        log("attack %d: %s" % (number, name))
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(limit)
        started = now()
        try:
            result = attack(args, scale)
        except Exception as error:  # noqa: BLE001 - one broken attack must not lose the others
            result = {"error": "%s: %s" % (type(error).__name__, error)}
        finally:
            signal.alarm(0)
            _kill_live_servers()
        result["name"], result["seconds"] = name, round(now() - started, 1)
        report["attacks"][str(number)] = result
        rows.append(summary_row(number, name, result))
        print("[%d] %-19s %s  | %s" % (number, name, verdict(result), result.get("line") or result.get("error")),
              flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(report, f, indent=2, ensure_ascii=False)
    print()
    print("#  attack              health p50/p99/max ms  fail  back in   verdict")
    for row in rows:
        print(row)
    print("logs and probe files: %s" % args.workdir)
    if args.out:
        print("report: %s" % os.path.abspath(args.out))
    return 0 if all(verdict(r) == "PASS" for r in report["attacks"].values()) else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_probe":
        probe_main(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
