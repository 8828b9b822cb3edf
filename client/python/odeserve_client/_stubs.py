"""Generating the Python gRPC stubs of odeserve.v1 from proto/odeserve/v1/inference.proto.

The proto file is the repository's (../../proto from client/python), or, in an sdist, the copy
that setup.py's sdist command writes to proto/ at the sdist's root; see ``find_proto_dir``.

Standard library only: setup.py loads this file by path at build time, before grpc or
protobuf need to be importable.

The generated modules are placed in the package ``odeserve_client._proto`` as
``inference_pb2`` and ``inference_pb2_grpc``; the import that protoc writes into the gRPC
module (``from odeserve.v1 import inference_pb2``) is rewritten to a relative one, so no
top-level ``odeserve`` package is created and nothing else on sys.path is shadowed.

Two generators, in this order:
  1. grpc_tools (the grpcio-tools package), when it is importable;
  2. ``protoc`` (``$PROTOC`` or PATH) with ``grpc_python_plugin`` (``$ODESERVE_GRPC_PYTHON_PLUGIN``,
     PATH, or /usr/bin/grpc_python_plugin: Debian's protobuf-compiler and
     protobuf-compiler-grpc packages).
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

PROTO_FILE = "odeserve/v1/inference.proto"
MODULES = ("inference_pb2.py", "inference_pb2_grpc.py")
# Bump when the generation or rewriting below changes, so cached stubs are regenerated.
_GENERATOR_REVISION = "1"

_HERE = os.path.dirname(os.path.abspath(__file__))


class StubGenerationError(RuntimeError):
    """The stubs could not be generated (no proto file, no generator, or protoc failed)."""


def find_proto_dir():
    """The folder holding odeserve/v1/inference.proto, the first of: $ODESERVE_PROTO_DIR; the
    copy in an unpacked sdist (<sdist>/proto, next to the package folder; setup.py's sdist
    command puts it there); the repository's proto/ (this file is
    client/python/odeserve_client/_stubs.py)."""
    candidates = []
    if os.environ.get("ODESERVE_PROTO_DIR"):
        candidates.append(os.environ["ODESERVE_PROTO_DIR"])
    candidates.append(os.path.join(_HERE, os.pardir, "proto"))  # an unpacked sdist
    candidates.append(os.path.join(_HERE, os.pardir, os.pardir, os.pardir, "proto"))  # the repository
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, PROTO_FILE)):
            return os.path.abspath(candidate)
    raise StubGenerationError(
        "cannot find %s (looked in: %s); set ODESERVE_PROTO_DIR to the odeserve repository's proto/ folder"
        % (PROTO_FILE, ", ".join(os.path.abspath(c) for c in candidates)))


def _find_plugin():
    for candidate in (os.environ.get("ODESERVE_GRPC_PYTHON_PLUGIN"), shutil.which("grpc_python_plugin"),
                      "/usr/bin/grpc_python_plugin"):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _generate_raw(proto_dir, out_dir):
    """Runs a generator: out_dir/odeserve/v1/inference_pb2{,_grpc}.py. Returns the generator used."""
    try:
        from grpc_tools import protoc as grpc_protoc  # grpcio-tools, when installed
    except ImportError:
        grpc_protoc = None
    if grpc_protoc is not None:
        try:
            from importlib import resources
            well_known = str(resources.files("grpc_tools") / "_proto")
        except Exception:  # older Pythons / layouts
            well_known = os.path.join(os.path.dirname(os.path.abspath(grpc_protoc.__file__)), "_proto")
        args = ["grpc_tools.protoc", "-I", proto_dir, "-I", well_known, "--python_out", out_dir,
                "--grpc_python_out", out_dir, os.path.join(proto_dir, PROTO_FILE)]
        if grpc_protoc.main(args) != 0:
            raise StubGenerationError("grpc_tools.protoc failed on %s" % PROTO_FILE)
        return "grpc_tools"
    protoc = os.environ.get("PROTOC") or shutil.which("protoc")
    plugin = _find_plugin()
    if not protoc or not plugin:
        raise StubGenerationError(
            "no stub generator: install grpcio-tools, or protoc and grpc_python_plugin "
            "(Debian: apt-get install protobuf-compiler protobuf-compiler-grpc); missing: %s"
            % ", ".join(n for n, p in (("protoc", protoc), ("grpc_python_plugin", plugin)) if not p))
    cmd = [protoc, "-I", proto_dir, "--python_out", out_dir, "--grpc_out", out_dir,
           "--plugin=protoc-gen-grpc=" + plugin, PROTO_FILE]
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if result.returncode != 0:
        raise StubGenerationError("%s failed (exit %d): %s" % (" ".join(cmd), result.returncode, result.stderr.strip()))
    return "protoc"


_ABSOLUTE_IMPORT = re.compile(r"^from odeserve\.v1 import (\w+_pb2) as ", re.MULTILINE)


def generate(out_dir, proto_dir=None):
    """Writes inference_pb2.py and inference_pb2_grpc.py (relative imports) into out_dir."""
    proto_dir = proto_dir or find_proto_dir()
    os.makedirs(out_dir, exist_ok=True)
    raw = tempfile.mkdtemp(prefix="odeserve-client-protoc-")
    try:
        _generate_raw(proto_dir, raw)
        for name in MODULES:
            src = os.path.join(raw, "odeserve", "v1", name)
            if not os.path.isfile(src):
                raise StubGenerationError("the generator wrote no %s" % name)
            with open(src, encoding="utf-8") as f:
                text = f.read()
            text = _ABSOLUTE_IMPORT.sub(r"from . import \1 as ", text)
            with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
                f.write("# Generated from %s by odeserve_client._stubs; do not edit.\n" % PROTO_FILE + text)
    finally:
        shutil.rmtree(raw, ignore_errors=True)
    return out_dir


def _cache_root():
    if os.environ.get("ODESERVE_CLIENT_STUB_DIR"):
        return os.environ["ODESERVE_CLIENT_STUB_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "odeserve_client")


def cache_key(proto_dir):
    """Changes with the proto file's content and the generator revision."""
    digest = hashlib.sha256()
    with open(os.path.join(proto_dir, PROTO_FILE), "rb") as f:
        digest.update(f.read())
    digest.update(_GENERATOR_REVISION.encode())
    return digest.hexdigest()[:16]


def _complete(folder):
    return all(os.path.isfile(os.path.join(folder, m)) for m in MODULES)


def ensure_cached(proto_dir=None):
    """Returns a folder with stubs of the current proto file, generating them on first use.

    The folder is <root>/stubs-<hash of the proto>, root being $ODESERVE_CLIENT_STUB_DIR, else
    $XDG_CACHE_HOME/odeserve_client or ~/.cache/odeserve_client, else (not writable) the temp
    folder. Written to a temporary folder and renamed into place, so concurrent first imports
    never see half-written modules."""
    proto_dir = proto_dir or find_proto_dir()
    name = "stubs-" + cache_key(proto_dir)
    roots = [_cache_root()]
    if not os.environ.get("ODESERVE_CLIENT_STUB_DIR"):
        roots.append(os.path.join(tempfile.gettempdir(), "odeserve_client-%s" % _user_tag()))
    errors = []
    for root in roots:
        final = os.path.join(root, name)
        if _complete(final):
            return final
        try:
            os.makedirs(root, exist_ok=True)
            work = tempfile.mkdtemp(prefix=name + ".tmp-", dir=root)
        except OSError as e:
            errors.append("%s: %s" % (root, e))
            continue
        try:
            generate(work, proto_dir)
            try:
                os.rename(work, final)
            except OSError:
                if not _complete(final):  # not a lost race: a real failure
                    raise
        finally:
            if os.path.isdir(work):
                shutil.rmtree(work, ignore_errors=True)
        return final
    raise StubGenerationError("no writable cache folder for the generated stubs: " + "; ".join(errors))


def _user_tag():
    try:
        return str(os.getuid())
    except AttributeError:  # not POSIX
        return os.environ.get("USERNAME", "user")


if __name__ == "__main__":  # python3 _stubs.py OUT_DIR: generate into a folder
    if len(sys.argv) != 2:
        sys.exit("usage: _stubs.py OUT_DIR")
    print(generate(sys.argv[1]))
