#!/usr/bin/python3
"""Lone-caller latency of each model's default steps against a fixed step count, in one run.

For every READY model of the server: one caller, no deadline, calls in turn with exact `steps`
(and `decoder_steps`) set to the fixed choice (e.g. the trained depth, the old default) and with
no steps at all (the server's default, MODEL_DEFAULT), alternating call by call so that a slow
spell of a noisy machine falls on both alike. Prints client-side p50/p90 per model and choice,
and the ratio default / fixed.

  # start a server on the bundled models and measure (L for the encoders, 6+6 for the translator)
  client/bench/default_steps_latency.py --start build/server/odeserve \
      --model_repository models/repository --fixed embed-sharebert=8,embed-eelbert=8,classify-sections=8,translate-en-de=6+6

Needs Debian's python3-grpcio; stubs are generated from proto/ at run time (models/odeserve_models/served.py).
"""
import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "models"))
from odeserve_models.served import Served  # noqa: E402

TEXTS = [
    "library for reading and writing compressed archives with a command line tool",
    "Python bindings for the GTK graphical user interface toolkit",
    "development files for the GNU C library",
    "fast and lightweight web server with support for FastCGI",
    "command-line tool to convert images between many formats",
    "transitional package for the documentation of the old name",
]


def parse_fixed(spec):
    """"a=8,b=6+6" -> {"a": (8, 0), "b": (6, 6)}."""
    fixed = {}
    for item in filter(None, spec.split(",")):
        name, steps = item.split("=")
        encoder, _, decoder = steps.partition("+")
        fixed[name] = (int(encoder), int(decoder or 0))
    return fixed


def call(served, info, text, steps, decoder_steps):
    pb, stub = served.pb, served.stub
    task = pb.Task.Name(info.task)
    if task == "EMBEDDING":
        request, rpc = pb.EmbedRequest(model=info.name, inputs=[text], truncate=True), stub.Embed
    elif task == "CLASSIFICATION":
        request, rpc = pb.ClassifyRequest(model=info.name, inputs=[text], truncate=True), stub.Classify
    else:
        request, rpc = pb.TranslateRequest(model=info.name, inputs=[text], truncate=True), stub.Translate
    if steps:
        request.compute.steps = steps
        request.compute.solver = pb.EULER
    if decoder_steps:
        request.compute.decoder_steps = decoder_steps
    start = time.perf_counter()
    response = rpc(request)  # no deadline: a deadline is a latency budget
    seconds = time.perf_counter() - start
    report = response.report
    return seconds, report.steps, getattr(report, "decoder_steps", 0), pb.StepChoice.Name(report.step_choice)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--address", default="")
    ap.add_argument("--start", default="", help="server binary to start")
    ap.add_argument("--model_repository", default=os.path.join(ROOT, "models", "repository"))
    ap.add_argument("--grpc_port", type=int, default=50093)
    ap.add_argument("--fixed", required=True, help="model=steps[+decoder_steps],... the fixed choice per model")
    ap.add_argument("--calls", type=int, default=200, help="measured calls per model and choice")
    ap.add_argument("--warmup", type=int, default=20)
    a = ap.parse_args()
    fixed = parse_fixed(a.fixed)
    served = Served(a.address, a.start, a.model_repository, a.grpc_port, metrics_port=-1)
    with served:
        print("| model | choice | steps run | p50 ms | p90 ms |")
        print("| --- | --- | --- | --- | --- |")
        ratios = []
        for name, info in sorted(served.models.items()):
            if name not in fixed or served.pb.ModelState.Name(info.state) != "READY":
                continue
            steps, decoder_steps = fixed[name]
            times = {"fixed": [], "default": []}
            ran = {}
            for i in range(a.warmup + a.calls):
                text = TEXTS[i % len(TEXTS)]
                for choice, args in (("fixed", (steps, decoder_steps)), ("default", (0, 0))):
                    seconds, s, d, how = call(served, info, text, *args)
                    ran[choice] = "%d%s (%s)" % (s, "+%d" % d if d else "", how)
                    if i >= a.warmup:
                        times[choice].append(seconds * 1e3)
            for choice in ("fixed", "default"):
                t = times[choice]
                print("| %s | %s | %s | %.2f | %.2f |" % (name, choice, ran[choice], statistics.median(t),
                                                       percentile(t, 0.9)))
            ratios.append((name, statistics.median(times["default"]) / statistics.median(times["fixed"])))
        for name, ratio in ratios:
            print("%s: default p50 / fixed p50 = %.2f" % (name, ratio))


if __name__ == "__main__":
    main()
