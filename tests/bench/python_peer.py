#!/usr/bin/python3
"""A Python peer of odeserve for the side-by-side benchmark (tests/bench/side_by_side.py): grpcio
+ PyTorch serving odeserve.v1.Inference Embed (and ListModels) for one model folder, with a
simple batcher (a batch waits up to --delay_ms after its first call, or until --max_batch
rows), running the same TorchScript module through the same solver loop as the server
(odeserve_models.solvers: input_stage, n steps of dt = L/n, output_stage) with the server's
tokenization (odeserve_models.text). What a straightforward Python deployment of the same model
would do; not a second implementation of odeserve's policies (no budgets, no step choice: the
call's steps, else L).

  tests/bench/python_peer.py --model_dir models/repository/embed-sharebert --port 0 --port_file /tmp/peer.port
"""
import argparse
import importlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "models"))


def stubs(tmp):
    """odeserve.v1 messages and services, generated now (as odeserve_models/served.py does)."""
    subprocess.check_call(["protoc", "-I", os.path.join(ROOT, "proto"), "--python_out", tmp, "--grpc_out", tmp,
                           "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin",
                           "odeserve/v1/inference.proto", "odeserve/v1/model_config.proto"])
    sys.path.insert(0, tmp)
    return (importlib.import_module("odeserve.v1.inference_pb2"),
            importlib.import_module("odeserve.v1.inference_pb2_grpc"))


class Call:
    def __init__(self, x, mask, steps):
        self.x, self.mask, self.steps = x, mask, steps
        self.arrived, self.done = time.monotonic(), threading.Event()
        self.out = self.error = None
        self.started = self.finished = self.batch_size = 0


def batcher(model, calls, max_batch, delay_s, pad):
    import torch
    from odeserve_models import solvers
    while True:
        batch = [calls.get()]
        deadline = batch[0].arrived + delay_s
        while sum(c.x.size(0) for c in batch) < max_batch:
            try:
                batch.append(calls.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
        for steps in sorted({c.steps for c in batch}):  # one step count per forward
            group = [c for c in batch if c.steps == steps]
            started = time.monotonic()
            try:
                T = max(c.x.size(1) for c in group)
                x = torch.cat([torch.nn.functional.pad(c.x, [0, T - c.x.size(1)] + [0, 0] * (c.x.dim() - 2),
                                                       value=pad if c.x.dim() == 2 else 0.0) for c in group])
                mask = torch.cat([torch.nn.functional.pad(c.mask, [0, T - c.mask.size(1)]) for c in group])
                with torch.inference_mode():
                    out = solvers.run(model, x, mask, steps, "EULER").float()
                rows = 0
                for c in group:
                    c.out = out[rows:rows + c.x.size(0)]
                    rows += c.x.size(0)
            except Exception as e:  # noqa: BLE001 (answer every call, keep serving)
                for c in group:
                    c.error = str(e)
            for c in group:
                c.started, c.finished, c.batch_size = started, time.monotonic(), len(group)
                c.done.set()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model_dir", required=True)
    ap.add_argument("--port", type=int, default=0, help="0 = any free port (see --port_file)")
    ap.add_argument("--port_file", default="", help="write grpc_port=N here once serving")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--max_batch", type=int, default=32)
    ap.add_argument("--delay_ms", type=float, default=2.0)
    ap.add_argument("--warmup_runs", type=int, default=4, help="forwards per warm-up shape at load")
    ap.add_argument("--workers", type=int, default=64, help="gRPC handler threads")
    args = ap.parse_args()

    import grpc
    import torch
    from odeserve_models import onnx_export, solvers, text
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    cfg = onnx_export.read_config(args.model_dir)
    if cfg["input_kind"] != "TOKEN_IDS" or cfg["task"] != "EMBEDDING":
        sys.exit("python_peer serves TOKEN_IDS embedding models only")
    model = torch.jit.load(os.path.join(args.model_dir, cfg["torchscript_file"]), map_location="cpu").eval()
    model.prepare()
    L = int(model.trained_depth)
    tok = text.Tokenizer(os.path.join(args.model_dir, cfg["tokenizer_file"]), cfg["max_sequence_length"])
    # Warm-up, as the server warms up at load: TorchScript's profiling executor runs a graph's
    # first calls slowly (profiling, then optimizing).
    T = cfg["max_sequence_length"]
    with torch.inference_mode():
        for rows in (1, args.max_batch):
            for length in (T, max(1, T // 2)):
                for _ in range(args.warmup_runs):
                    solvers.run(model, torch.full((rows, length), 5, dtype=torch.long), torch.ones(rows, length), L)
    tmp = tempfile.mkdtemp(prefix="odeserve-peer-stubs-")
    pb, pbg = stubs(tmp)
    calls = queue.Queue()
    threading.Thread(target=batcher, args=(model, calls, args.max_batch, args.delay_ms / 1000, tok.pad),
                     daemon=True).start()

    from google.protobuf.duration_pb2 import Duration

    def duration(seconds):
        d = Duration()
        d.FromNanoseconds(int(seconds * 1e9))
        return d

    class Inference(pbg.InferenceServicer):
        def ListModels(self, request, context):
            return pb.ListModelsResponse(models=[pb.ModelInfo(
                name=cfg["name"], task=pb.EMBEDDING, trained_depth=L, state=pb.READY, default_steps=L,
                max_sequence_length=cfg["max_sequence_length"], max_batch_size=args.max_batch, device="cpu")])

        def Embed(self, request, context):
            if request.model not in ("", cfg["name"]):
                context.abort(grpc.StatusCode.NOT_FOUND, "model %r not served" % request.model)
            if not request.inputs:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no inputs")
            steps = request.compute.steps or L
            x, mask = tok.batch(list(request.inputs))
            call = Call(x, mask, steps)
            calls.put(call)
            call.done.wait()
            if call.error is not None:
                context.abort(grpc.StatusCode.INTERNAL, call.error)
            out = torch.nn.functional.normalize(call.out, dim=-1) if request.normalize else call.out
            report = pb.ComputeReport(steps=steps, step_size=L / steps, field_evaluations=steps,
                                      queue_time=duration(call.started - call.arrived),
                                      compute_time=duration(call.finished - call.started),
                                      total_time=duration(call.finished - call.arrived),
                                      batch_size=call.batch_size, device="cpu", tokens=int(mask.sum()),
                                      budget_met=True)
            return pb.EmbedResponse(model=cfg["name"], report=report,
                                    embeddings=[pb.Embedding(values=row.tolist()) for row in out])

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.workers))
    pbg.add_InferenceServicer_to_server(Inference(), server)
    port = server.add_insecure_port("127.0.0.1:%d" % args.port)
    server.start()
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write("grpc_port=%d\n" % port)
        os.replace(args.port_file + ".tmp", args.port_file)
    print("python_peer: %s (L=%d) on 127.0.0.1:%d, %d torch threads, batch <= %d, delay %.1f ms"
          % (cfg["name"], L, port, args.threads, args.max_batch, args.delay_ms), file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: server.stop(0))  # stop, then remove the stubs
    try:
        server.wait_for_termination()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
