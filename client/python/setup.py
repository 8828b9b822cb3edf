"""odeserve-client: `pip install ./client/python` from the odeserve repository.

The gRPC stubs are generated at build time (build_py) from ../../proto/odeserve/v1/inference.proto
(or $ODESERVE_PROTO_DIR) into odeserve_client/_proto/ of the built package: with grpc_tools when
it is installed, else protoc + grpc_python_plugin (Debian: protobuf-compiler,
protobuf-compiler-grpc). The source tree itself is never written to.

The proto file lies outside this folder, where MANIFEST.in cannot reach, so the sdist command
copies it into the sdist as proto/odeserve/v1/inference.proto, where odeserve_client._stubs
finds it when the sdist is built or installed (`pip install odeserve-client-X.tar.gz`).

There is deliberately no pyproject.toml: with one, pip builds in an isolated environment and
downloads setuptools first, which fails offline; without one, pip uses the setuptools already
installed (Debian's python3-setuptools).
"""
import importlib.util
import os
import re

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))


def _stubs_module():
    # By path: importing the package would need grpc and the stubs it is about to build.
    spec = importlib.util.spec_from_file_location("_odeserve_client_stubs",
                                                  os.path.join(HERE, "odeserve_client", "_stubs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithStubs(build_py):
    """build_py, then the generated inference_pb2.py / inference_pb2_grpc.py into the build."""

    def run(self):
        super().run()
        out = os.path.join(self.build_lib, "odeserve_client", "_proto")
        self.announce("generating odeserve.v1 stubs into %s" % out, level=2)
        if not self.dry_run:
            _stubs_module().generate(out)


class SdistWithProto(sdist):
    """sdist, plus the proto file the stubs are generated from, as proto/<PROTO_FILE> of the
    release tree: next to odeserve_client/, where _stubs.find_proto_dir looks."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        stubs = _stubs_module()
        source = os.path.join(stubs.find_proto_dir(), stubs.PROTO_FILE)
        target = os.path.join(base_dir, "proto", stubs.PROTO_FILE)
        self.mkpath(os.path.dirname(target))
        self.copy_file(source, target)


def _version():
    with open(os.path.join(HERE, "odeserve_client", "_version.py"), encoding="utf-8") as f:
        return re.search(r'__version__ = "([^"]+)"', f.read()).group(1)


def _long_description():
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        return f.read()


setup(
    name="odeserve-client",
    version=_version(),
    description="Python client for the odeserve gRPC inference server (odeserve.v1.Inference)",
    long_description=_long_description(),
    long_description_content_type="text/markdown",
    packages=["odeserve_client", "odeserve_client._proto"],
    python_requires=">=3.7",
    # Debian: python3-grpcio, python3-protobuf (and python3-numpy for array embeddings).
    install_requires=["grpcio>=1.30", "protobuf>=3.19"],
    extras_require={"numpy": ["numpy"]},
    cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProto},
    zip_safe=False,
)
