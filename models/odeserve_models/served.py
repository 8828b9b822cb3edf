"""Talking to a running odeserve from Python evaluation scripts: stubs generated at run time
from proto/ (protoc + /usr/bin/grpc_python_plugin, python3-grpcio), and an optional server
process started and stopped around the evaluation."""
import os
import shutil
import subprocess
import tempfile
import time

from .protos import forget, import_generated

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Served:
    """Context manager: stubs, the channel, and (with `start`) the server process."""

    def __init__(self, address="", start="", model_repository="", grpc_port=50071, metrics_port=9171,
                 log_path=os.devnull, extra_flags=()):
        self.address = address or "localhost:%d" % grpc_port
        self.start, self.model_repository = start, model_repository
        self.grpc_port, self.metrics_port = grpc_port, metrics_port
        self.log_path, self.extra_flags = log_path, list(extra_flags)
        self.proc = None
        self.tmp = None

    def __enter__(self):
        import grpc
        self.tmp = tempfile.mkdtemp(prefix="odeserve-stubs-")
        subprocess.check_call(["protoc", "-I", os.path.join(ROOT, "proto"), "--python_out", self.tmp,
                               "--grpc_out", self.tmp, "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin",
                               "odeserve/v1/inference.proto", "odeserve/v1/model_config.proto"])
        self.pb, pbg = import_generated(self.tmp, ["inference_pb2", "inference_pb2_grpc"])
        if self.start:
            cmd = [self.start, "--model_repository", self.model_repository, "--grpc_port", str(self.grpc_port),
                   "--metrics_port", str(self.metrics_port)] + self.extra_flags
            print("starting:", " ".join(cmd), flush=True)
            self.proc = subprocess.Popen(cmd, stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT)
        self.channel = grpc.insecure_channel(self.address, options=[("grpc.max_receive_message_length", 64 << 20)])
        self.stub = pbg.InferenceStub(self.channel)
        self.models = self._wait_ready(grpc)
        return self

    def _wait_ready(self, grpc):
        listed = None
        for _ in range(240):
            try:
                listed = self.stub.ListModels(self.pb.ListModelsRequest(), timeout=5)
                if listed.models and all(m.state != self.pb.LOADING for m in listed.models):
                    break
            except grpc.RpcError:
                pass
            time.sleep(1)
        if listed is None:
            raise RuntimeError("server at %s never answered ListModels" % self.address)
        return {m.name: m for m in listed.models}

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        forget()  # the stubs stay usable; a later import reads a new folder
        shutil.rmtree(self.tmp, ignore_errors=True)
        return False
