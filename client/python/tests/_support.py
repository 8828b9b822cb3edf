"""Shared by the tests: import odeserve_client from this source tree (no install needed), with
its stubs generated into a fresh temporary folder, and start the real server."""
import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)  # client/python
REPO_ROOT = os.path.dirname(os.path.dirname(PACKAGE_ROOT))

if PACKAGE_ROOT not in sys.path:
    sys.path.insert(0, PACKAGE_ROOT)
# Client() defaults its bearer token to $ODESERVE_TOKEN: tests that want one set it themselves.
os.environ.pop("ODESERVE_TOKEN", None)
if not os.environ.get("ODESERVE_CLIENT_STUB_DIR"):
    # As from a clean checkout: nothing generated yet, nothing from a user's cache.
    STUB_ROOT = tempfile.mkdtemp(prefix="odeserve-client-test-stubs-")
    os.environ["ODESERVE_CLIENT_STUB_DIR"] = STUB_ROOT
    atexit.register(shutil.rmtree, STUB_ROOT, True)


def server_paths():
    """(binary, test repository): $ODESERVE_BINARY / $ODESERVE_TEST_REPOSITORY (set by ctest,
    which must then exist), else build/server/odeserve and build/test-repository if present,
    else the end-to-end tests are skipped."""
    binary = os.environ.get("ODESERVE_BINARY")
    repository = os.environ.get("ODESERVE_TEST_REPOSITORY")
    if binary or repository:
        if not (binary and os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise RuntimeError("ODESERVE_BINARY=%r is not an executable file" % binary)
        if not (repository and os.path.isdir(repository)):
            raise RuntimeError("ODESERVE_TEST_REPOSITORY=%r is not a folder" % repository)
        return binary, repository
    binary = os.path.join(REPO_ROOT, "build", "server", "odeserve")
    repository = os.path.join(REPO_ROOT, "build", "test-repository")
    if os.path.isfile(binary) and os.path.isdir(repository):
        return binary, repository
    raise unittest.SkipTest("no server: set ODESERVE_BINARY and ODESERVE_TEST_REPOSITORY (or build into build/)")


class ServerProcess:
    """build/server/odeserve on 127.0.0.1, any free port (read from --port_file, which the
    server writes once every model has loaded), metrics off."""

    def __init__(self, extra_flags=(), startup_timeout=120):
        binary, repository = server_paths()
        self.dir = tempfile.mkdtemp(prefix="odeserve-pyclient-server-")
        port_file = os.path.join(self.dir, "ports")
        self.log_path = os.path.join(self.dir, "log")
        args = [binary, "--model_repository=" + repository, "--grpc_address=127.0.0.1", "--grpc_port=0",
                "--metrics_port=-1", "--port_file=" + port_file, "--drain_timeout=5s"] + list(extra_flags)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        give_up = time.monotonic() + startup_timeout
        self.grpc_port = 0
        while time.monotonic() < give_up:
            if os.path.isfile(port_file):
                with open(port_file) as f:
                    fields = dict(line.split("=", 1) for line in f.read().split() if "=" in line)
                self.grpc_port = int(fields.get("grpc_port", 0))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if not self.grpc_port:
            self.stop()
            raise RuntimeError("odeserve did not start (%s):\n%s" % (" ".join(args), self.log()))

    @property
    def address(self):
        return "127.0.0.1:%d" % self.grpc_port

    def log(self):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
