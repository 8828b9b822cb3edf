#!/usr/bin/python3
"""The latency-budget benchmarks of docs/BENCHMARKS.md, end to end over real gRPC.

Starts odeserve on a model repository, measures with odeserve-bench, and prints one JSON
document with every figure (and writes each bench report + SVG under --out):

  1. full-depth batch-1 latency B1 (closed loop, concurrency 1, steps = L);
  2. saturation throughput at full depth (closed-loop sweep);
  3. at 70% of saturation, open loop, budgets 0.5x/1x/2x/4x B1: the adaptive policy (server picks
     steps) vs fixed full-depth and fixed 1-step policies, same arrivals (same seed); per class the
     hit rate and the quality delivered (the mean profile quality of the (solver, steps) each
     answer was computed with; GetModel's measured profile);
     3b. the adaptive policy again on a copy of the repository with batching.continuous_batching
     off for --model (queued calls wait for the running batch to end instead of joining it);
     3c. mixed tenants, with and without continuous batching: calls that request full depth
     explicitly (no budget) at 1/6 of saturation, and budgeted calls (0.5x and 1x B1) at 1/6;
  4. the oracle: for every fixed step count, the same load; per budget class the largest step
     count that meets the budget for >= 99% of calls; adaptive mean steps / oracle steps, and
     adaptive mean field evaluations / oracle steps (the fixed runs are Euler: one per step);
  5. dynamic batching: closed loop, concurrency 32, max_batch_size from the config vs 1, inputs
     cut to --batching_tokens tokens (both servers run a repository copy whose
     --batching_model has that max_sequence_length; calls truncate);
  6. overload: open loop at 3x saturation for 60 s; health latency sampled every 0.5 s, RSS of
     the server sampled every second, codes of refused calls.

Usage: budget_benchmarks.py --build build --repository models/repository
         --model classify-sections --method classify --inputs tests/fixtures/descriptions-sample.txt
"""
import argparse
import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "deploy"))
import odeserve_testlib as testlib  # noqa: E402


def log(*args):
    print(time.strftime("%H:%M:%S"), *args, file=sys.stderr, flush=True)


_running_servers = []


@atexit.register
def _kill_running_servers():
    """A driver that dies of an exception must not leave its servers holding the cores."""
    for server in list(_running_servers):
        if server.proc.poll() is None:
            server.proc.kill()


class Server:
    def __init__(self, binary, repository, workdir, name, flags=(), env=None):
        """Starts `binary` on `repository`; `flags` are extra odeserve flags, `env` extra
        environment variables."""
        self.port_file = os.path.join(workdir, name + ".ports")
        self.log_path = os.path.join(workdir, name + ".log")
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [binary, "--model_repository", repository, "--grpc_address", "127.0.0.1", "--grpc_port", "0",
             "--metrics_address", "127.0.0.1", "--metrics_port", "0", "--port_file", self.port_file] + list(flags),
            stderr=self.log_file, env=dict(os.environ, **(env or {})))
        _running_servers.append(self)
        for _ in range(1200):
            if os.path.exists(self.port_file):
                text = open(self.port_file).read()
                self.grpc_port = int(re.search(r"grpc_port=(\d+)", text).group(1))
                self.metrics_port = int(re.search(r"metrics_port=(-?\d+)", text).group(1))
                return
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: " + open(self.log_path).read()[-2000:])
            time.sleep(0.1)
        raise RuntimeError("server did not start")

    @property
    def address(self):
        return "127.0.0.1:%d" % self.grpc_port

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self.log_file.close()
        _running_servers.remove(self)
        return code


class HealthProbe:
    """grpc.health.v1 Check over one channel kept open (tests/deploy/odeserve_testlib.Client:
    python3-grpcio, messages encoded by hand). check_ms() is the call's latency in ms, or None
    where grpcio is missing or the call failed or did not answer SERVING (counted in failures)."""

    def __init__(self, address, service):
        self.failures, self.service = 0, service
        self.client = testlib.Client(address) if testlib.grpc is not None else None
        if self.client is not None:
            self.client.health(service, timeout=5)  # connect before the load starts

    def check_ms(self):
        if self.client is None:
            return None
        t0 = time.monotonic()
        if self.client.health(self.service) != testlib.HEALTH_SERVING:
            self.failures += 1
            return None
        return (time.monotonic() - t0) * 1000

    def close(self):
        if self.client is not None:
            self.client.close()


def saturation_rate(sweep):
    """The sweep's saturation, or its best level's throughput where no level was healthy (the
    sweep then writes saturation_rps 0); None where it served nothing. Never 0: a rate of 0 would
    turn every open-loop run of this script into a closed loop at concurrency 1."""
    sat = sweep["sweep"].get("saturation_rps") or max(
        [p["throughput_rps"] or 0 for p in sweep["sweep"]["points"]], default=0)
    return sat if sat > 0 else None


class Bench:
    def __init__(self, args, out):
        self.args, self.out = args, out
        self.binary = os.path.join(args.build, "client", "odeserve-bench")

    def command(self, name, server, extra, method=None, model=None, seed=7):
        json_path = os.path.join(self.out, name + ".json")
        cmd = [self.binary, "--address", server.address, "--method", method or self.args.method,
               "--model", model or self.args.model, "--inputs_file", self.args.inputs, "--seed", str(seed),
               "--progress=false", "--json_out", json_path, "--svg_out", os.path.join(self.out, name + ".svg")]
        log("bench", name, " ".join(extra))
        return cmd + extra, json_path

    def run(self, name, server, extra, method=None, model=None):
        cmd, json_path = self.command(name, server, extra, method, model)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(json_path) as f:
            return json.load(f)

    def start(self, name, server, extra, seed):
        """Starts a run in the background; finish() waits for it and returns its report."""
        cmd, json_path = self.command(name, server, extra, seed=seed)
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL), json_path

    @staticmethod
    def finish(started):
        proc, json_path = started
        if proc.wait() != 0:
            raise RuntimeError("odeserve-bench failed: " + json_path)
        with open(json_path) as f:
            return json.load(f)


def repository_copy(src, out, name, model, edit):
    """A copy of repository `src` under `out`, with `edit(text)` applied to `model`'s config."""
    repo = os.path.join(out, name)
    shutil.rmtree(repo, ignore_errors=True)
    shutil.copytree(src, repo)
    cfg = os.path.join(repo, model, "config.pbtxt")
    text = edit(open(cfg).read())
    with open(cfg, "w") as f:
        f.write(text)
    return repo


def profile_quality(model_info, metric=""):
    """GetModel's measured quality points of one metric as {"euler-4": value}, keyed as
    odeserve-bench keys the (solver, steps) choices, and that metric: `metric`, or the first
    point's (profiles list the primary metric first; GetModel does not name it). ({}, "") for a
    model without a measured profile. Translation points (which also vary decoder steps and
    beams) are left out."""
    if not model_info.get("quality_profile_measured", model_info.get("qualityProfileMeasured", False)):
        return {}, ""
    points = [p for p in model_info.get("quality_profile", model_info.get("qualityProfile", []))
              if "solver" in p and "value" in p
              and not (p.get("decoder_steps", p.get("decoderSteps")) or p.get("beam_size", p.get("beamSize")))]
    metric = metric or (points[0].get("metric", "") if points else "")
    quality = {"%s-%d" % (str(p["solver"]).lower(), int(p.get("steps", 0))): float(p["value"])
               for p in points if p.get("metric", "") == metric}
    return quality, metric


def delivered_quality(choices, quality):
    """The mean profile quality of the answers a class was served with: each call counts at the
    measured quality of the (solver, steps) the server ran. None where nothing was reported or
    a choice has no measured point (a call's quality is then unknown, not zero)."""
    calls = sum(choices.values())
    if not calls or not quality or any(choice not in quality for choice in choices):
        return None
    return sum(quality[choice] * n for choice, n in choices.items()) / calls


def policy_summary(report, quality=None):
    """One policy's run (adaptive or fixed steps): hit rates, the steps it ran and, per class, the
    quality it delivered."""
    return {"hit_rate": report["overall"]["client_hit_rate"],
            "throughput_rps": report["throughput_rps"],
            "errors": report["overall"]["errors"],
            "by_class": {k: {"hit_rate": v["client_hit_rate"], "mean_steps": v["steps"]["mean"],
                             "mean_field_evaluations": v["field_evaluations"]["mean"],
                             "choices": v["choice_histogram"], "p99_ms": v["latency_ms"]["p99"],
                             "delivered_quality": delivered_quality(v["choice_histogram"], quality)}
                         for k, v in class_table(report).items()}}


def over_oracle(adaptive, oracle, samples):
    """Per class: the adaptive run's mean `samples` ("steps" or "field_evaluations") over the
    oracle's fixed Euler step count; None where the oracle found none or nothing was reported."""
    table = class_table(adaptive)
    ratios = {}
    for label, steps in oracle.items():
        mean = table[label].get(samples, {}).get("mean")
        ratios[label] = mean / steps if steps and mean is not None else None
    return ratios


def class_table(report):
    return {c["label"]: c for c in report["classes"]}


def add_common_arguments(ap):
    """The build, repository, model and inputs every benchmark script here takes."""
    ap.add_argument("--build", default="build")
    ap.add_argument("--repository", default="models/repository")
    ap.add_argument("--model", default="classify-sections")
    ap.add_argument("--method", default="classify")
    ap.add_argument("--inputs", default="tests/fixtures/descriptions-sample.txt")


def main():
    ap = argparse.ArgumentParser()
    add_common_arguments(ap)
    ap.add_argument("--batching_model", default="embed-sharebert")
    ap.add_argument("--batching_tokens", type=int, default=32,
                    help="dynamic batching: inputs cut to this many tokens (bos/eos included); 0 = the model's own limit")
    ap.add_argument("--duration", default="20s")
    ap.add_argument("--out", default="")
    ap.add_argument("--server_flags", default="", help="extra odeserve flags, space-separated")
    ap.add_argument("--quality_metric", default="",
                    help="the profile metric the delivered quality is read in (default: the profile's first)")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: nojoin,oracle,batching,overload")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="odeserve-budget-bench-")
    os.makedirs(out, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    server_flags = args.server_flags.split()
    bench = Bench(args, out)
    server_bin = os.path.join(args.build, "server", "odeserve")

    def start_server(repository, name):
        return Server(server_bin, repository, out, name, server_flags)

    result = {"out": out, "model": args.model, "method": args.method, "server_flags": server_flags}

    server = start_server(args.repository, "main")
    info = subprocess.run([os.path.join(args.build, "client", "odeserve-cli"), "--address", server.address,
                           "--json", "model", args.model], check=True, capture_output=True, text=True).stdout
    model_info = json.loads(info)
    model_info = model_info.get("model", model_info)
    depth = int(model_info.get("trained_depth", model_info.get("trainedDepth")))
    max_steps = int(model_info.get("max_steps", model_info.get("maxSteps")))
    result["trained_depth"] = depth
    quality, result["quality_metric"] = profile_quality(model_info, args.quality_metric)
    result["quality_profile"] = quality
    # GetModel: whether the main server's runs join queued calls into running batches.
    result["continuous_batching"] = bool(model_info.get("continuous_batching", model_info.get("continuousBatching", False)))

    # 1. Full-depth batch-1 latency.
    b1 = bench.run("b1-full-depth", server, ["--concurrency", "1", "--duration", "10s", "--warmup", "3s",
                                             "--steps", str(depth)])
    b1_ms = b1["overall"]["latency_ms"]["p50"]
    result["full_depth_batch1_p50_ms"] = b1_ms
    budgets = [0.5 * b1_ms, b1_ms, 2 * b1_ms, 4 * b1_ms]
    budget_arg = ",".join("%.3fms" % b for b in budgets)
    result["budgets_ms"] = budgets

    # 2. Saturation at full depth.
    sweep = bench.run("saturation-sweep", server, ["--sweep", "--steps", str(depth), "--sweep_step", "6s",
                                                   "--sweep_max", "64", "--sweep_p99_limit_ms", "%.3f" % (40 * b1_ms),
                                                   # one noisy level must not end the sweep early
                                                   "--sweep_patience", "3"])
    sat = saturation_rate(sweep)
    if sat is None:
        sys.exit("the saturation sweep served nothing: see %s" % server.log_path)
    result["saturation_rps"] = sat
    rate = 0.7 * sat
    result["rate_70pct_rps"] = rate

    # 3. Adaptive vs fixed full depth at 70% of saturation, same arrivals.
    common = ["--rate", "%.2f" % rate, "--duration", args.duration, "--warmup", "3s", "--budgets", budget_arg]
    adaptive = bench.run("adaptive-70pct", server, common)
    result["adaptive_70pct"] = policy_summary(adaptive, quality)
    # The fixed policies it is compared with, at the same arrivals (the oracle reuses these runs).
    fixed_runs = {steps: bench.run("fixed-%d-70pct" % steps, server, common + ["--steps", str(steps)])
                  for steps in sorted({1, depth})}
    result["fixed_full_depth_70pct"] = policy_summary(fixed_runs[depth], quality)
    result["fixed_1_step_70pct"] = policy_summary(fixed_runs[1], quality)

    # 3b. The same adaptive run without continuous batching (its own server, same arrivals).
    if "nojoin" not in skip:
        repo_nojoin = repository_copy(args.repository, out, "repo-no-joins", args.model,
                                      lambda text: text.replace("batching {", "batching {\n  continuous_batching: false", 1))
        s = start_server(repo_nojoin, "no-joins")
        result["adaptive_70pct_without_continuous_batching"] = policy_summary(
            bench.run("adaptive-70pct-no-joins", s, common))
        s.stop()

        # 3c. Mixed tenants: budgeted calls arrive while full-depth batches run.
        mixed = {}
        tenant_rate = "%.2f" % (sat / 6)
        for name, repo in (("continuous_batching", args.repository), ("without", repo_nojoin)):
            s = start_server(repo, "mixed-" + name)
            background = bench.start("mixed-%s-full-depth" % name, s,
                                     ["--rate", tenant_rate, "--duration", "15s", "--warmup", "1s", "--steps", str(depth)],
                                     seed=3)
            time.sleep(1.5)  # the full-depth tenant is running before the budgeted one starts
            budgeted = bench.run("mixed-%s-budgeted" % name, s,
                                 ["--rate", tenant_rate, "--duration", "10s", "--warmup", "1s",
                                  "--budgets", "%.3fms,%.3fms" % (budgets[0], budgets[1])])
            full = Bench.finish(background)
            s.stop()
            mixed[name] = {"budgeted": policy_summary(budgeted),
                           "full_depth": {"throughput_rps": full["throughput_rps"],
                                          "p50_ms": full["overall"]["latency_ms"]["p50"],
                                          "p99_ms": full["overall"]["latency_ms"]["p99"],
                                          "errors": full["overall"]["errors"]}}
        result["mixed_tenants"] = dict(mixed, rate_each_rps=sat / 6)

    # 4. Oracle: largest fixed step count meeting each budget for >= 99% of calls, same load.
    if "oracle" not in skip:
        per_steps = {}
        for steps in range(1, max_steps + 1):
            r = fixed_runs.get(steps) or bench.run("fixed-%d-70pct" % steps, server, common + ["--steps", str(steps)])
            per_steps[steps] = {k: v["client_hit_rate"] for k, v in class_table(r).items()}
        oracle = {}
        for label in class_table(adaptive):
            ok = [s for s, rates in per_steps.items() if (rates.get(label) or 0) >= 0.99]
            oracle[label] = max(ok) if ok else 0
        result["oracle_steps"] = oracle
        result["adaptive_over_oracle_mean_steps"] = over_oracle(adaptive, oracle, "steps")
        # The fixed runs use Euler (one evaluation per step): in evaluations the oracle spends its
        # steps, while an adaptive Heun-1 is one step of two evaluations.
        result["adaptive_over_oracle_mean_field_evaluations"] = over_oracle(adaptive, oracle, "field_evaluations")
        result["fixed_steps_hit_rates"] = per_steps
    server.stop()

    # 5. Dynamic batching vs max_batch_size 1 (closed loop, concurrency 32).
    if "batching" not in skip:
        def cut(text):
            if args.batching_tokens <= 0:
                return text
            return re.sub(r"max_sequence_length:\s*\d+", "max_sequence_length: %d" % args.batching_tokens, text)

        repo_dynamic = repository_copy(args.repository, out, "repo-batching", args.batching_model, cut)
        repo_b1 = repository_copy(args.repository, out, "repo-batch1", args.batching_model,
                                  lambda text: re.sub(r"max_batch_size:\s*\d+", "max_batch_size: 1", cut(text)))
        throughput = {}
        for name, repo in (("dynamic", repo_dynamic), ("batch1", repo_b1)):
            s = start_server(repo, "batching-" + name)
            r = bench.run("batching-" + name, s, ["--concurrency", "32", "--duration", "15s", "--warmup", "3s"],
                          method="embed", model=args.batching_model)
            throughput[name] = r["throughput_rps"]
            s.stop()
        result["batching"] = {"tokens": args.batching_tokens,
                              "dynamic_rps": throughput["dynamic"], "max_batch_1_rps": throughput["batch1"],
                              "ratio": throughput["dynamic"] / throughput["batch1"]}

    # 6. Overload at 3x saturation for 60 s.
    if "overload" not in skip:
        server = start_server(args.repository, "overload")
        samples = {"health_ms": [], "health_rpc_ms": [], "rss_kib": [], "rss_after_warmup": []}
        probe = HealthProbe(server.address, "odeserve.v1.Inference")
        stop = threading.Event()
        warmup_s = 2
        measured_from = time.monotonic() + warmup_s
        cli = os.path.join(args.build, "client", "odeserve-cli")

        def sample():
            last_rss = 0
            while not stop.is_set():
                t0 = time.monotonic()
                subprocess.run([cli, "--address", server.address, "--deadline", "2s", "health", "odeserve.v1.Inference"],
                               capture_output=True)
                samples["health_ms"].append((time.monotonic() - t0) * 1000)
                rpc_ms = probe.check_ms()
                if rpc_ms is not None:
                    samples["health_rpc_ms"].append(rpc_ms)
                if time.monotonic() - last_rss >= 1:
                    samples["rss_kib"].append(server.rss_kib())
                    if time.monotonic() >= measured_from:
                        samples["rss_after_warmup"].append(samples["rss_kib"][-1])
                    last_rss = time.monotonic()
                time.sleep(0.5)

        sampler = threading.Thread(target=sample)
        sampler.start()
        r = bench.run("overload-3x", server, ["--rate", "%.2f" % (3 * sat), "--duration", "60s", "--warmup", "%ds" % warmup_s,
                                              "--budgets", budget_arg, "--set_deadline"])
        stop.set()
        sampler.join()
        # Over the measured 60 s, as the target reads: the server trims its heap after loading,
        # so the warm-up's first calls grow it back to the working set (every sample is kept in
        # rss_kib_per_second).
        rss = samples["rss_after_warmup"] or samples["rss_kib"]
        health = sorted(samples["health_ms"])
        health_rpc = sorted(samples["health_rpc_ms"])
        probe.close()
        ok_calls = r["overall"]["ok"]
        result["overload_3x"] = {
            "requests": r["requests"], "ok": ok_calls, "errors_by_code": r["overall"]["errors"],
            "accepted_met_budget_rate": (r["overall"]["client_hits"] / ok_calls) if ok_calls else None,
            "health_ms_max": health[-1] if health else None,
            "health_ms_p50": health[len(health) // 2] if health else None,
            "note_health": "includes odeserve-cli process start (fork/exec, channel setup)",
            # the same check on one channel kept open for the whole run: the server's own answer
            # time under the load (None where python3-grpcio is missing)
            "health_rpc_ms_max": health_rpc[-1] if health_rpc else None,
            "health_rpc_ms_p50": health_rpc[len(health_rpc) // 2] if health_rpc else None,
            "health_rpc_failures": probe.failures,
            "rss_kib_first": rss[0] if rss else None, "rss_kib_last": rss[-1] if rss else None,
            "rss_kib_max": max(rss) if rss else None,
            "rss_growth_pct": (100.0 * (rss[-1] - rss[0]) / rss[0]) if rss else None,
            # Bounded or leaking: growth over the second half of the run, once batches of every
            # size have been allocated, next to the whole-run figure above.
            "rss_growth_second_half_pct": (100.0 * (rss[-1] - rss[len(rss) // 2]) / rss[len(rss) // 2])
            if len(rss) > 2 else None,
            "rss_kib_per_second": samples["rss_kib"]}
        server.stop()

    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
