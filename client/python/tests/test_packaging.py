"""Packaging without a server: `setup.py build` generates the stubs into the built package, and
an sdist carries the proto file, so that it builds where the repository is not.

Every setup.py run uses this interpreter, with $ODESERVE_PROTO_DIR unset; the built packages are
imported in a fresh interpreter whose working folder is outside the repository.
"""
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _support  # noqa: E402  (sys.path and the stub folder first)

PROTO_FILE = "odeserve/v1/inference.proto"

# Imports the package from PYTHONPATH and says where its code and stubs come from.
_IMPORT_CHECK = """
import os, sys
import odeserve_client, odeserve_client._proto as p
from odeserve_client._proto import inference_pb2, inference_pb2_grpc
assert inference_pb2.DESCRIPTOR.package == "odeserve.v1", inference_pb2.DESCRIPTOR.package
assert hasattr(inference_pb2_grpc, "InferenceStub")
assert inference_pb2.EmbedRequest.DESCRIPTOR.full_name == "odeserve.v1.EmbedRequest"
odeserve_client.Client("127.0.0.1:1").close()
print(os.path.dirname(os.path.realpath(odeserve_client.__file__)))
print(os.path.realpath(p.STUB_DIR))
"""


def _environment(**extra):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("ODESERVE_PROTO_DIR", None)
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def _run(args, cwd, env):
    result = subprocess.run(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=240)
    if result.returncode != 0:
        raise AssertionError("%s (in %s) failed with exit %d:\n%s" % (" ".join(args), cwd, result.returncode,
                                                                       result.stdout))
    return result.stdout


def _files(root):
    """Every path under root, caches of the tests' own imports left out."""
    found = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found.update(os.path.relpath(os.path.join(folder, n), root) for n in dirs + files)
    return found


class PackagingTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="odeserve-client-packaging-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def import_built(self, lib):
        """Imports odeserve_client from lib (cwd outside the repository, an empty stub cache that
        must stay empty) and returns (package folder, STUB_DIR)."""
        cache = os.path.join(self.tmp, "stub-cache")
        os.makedirs(cache, exist_ok=True)
        work = tempfile.mkdtemp(dir=self.tmp, prefix="cwd-")
        out = _run([sys.executable, "-c", _IMPORT_CHECK], work,
                   _environment(PYTHONPATH=lib, ODESERVE_CLIENT_STUB_DIR=cache)).split()
        self.assertEqual(os.listdir(cache), [], "the stubs came from the cache, not the built package")
        return out[-2], out[-1]

    def check_built_lib(self, lib):
        package = os.path.join(lib, "odeserve_client")
        for name in ("inference_pb2.py", "inference_pb2_grpc.py"):
            self.assertTrue(os.path.isfile(os.path.join(package, "_proto", name)), name)
        with open(os.path.join(package, "_proto", "inference_pb2_grpc.py"), encoding="utf-8") as f:
            self.assertIn("from . import inference_pb2 as", f.read())
        package_dir, stub_dir = self.import_built(lib)
        self.assertEqual(package_dir, os.path.realpath(package))
        self.assertEqual(stub_dir, os.path.realpath(os.path.join(package, "_proto")))

    def test_build_generates_the_stubs(self):
        # As `pip install ./client/python` builds it, in the source tree, which stays untouched.
        before = _files(_support.PACKAGE_ROOT)
        build_base = os.path.join(self.tmp, "build")
        _run([sys.executable, "setup.py", "-q", "build", "--build-base", build_base], _support.PACKAGE_ROOT,
             _environment())
        self.check_built_lib(os.path.join(build_base, "lib"))
        self.assertEqual(_files(_support.PACKAGE_ROOT), before, "setup.py build wrote into the source tree")

    def test_sdist_carries_the_proto_and_builds_outside_the_repository(self):
        # sdist assembles its release tree in the working folder, so it runs on a copy of
        # client/python and proto/ laid out as in the repository, not in the source tree itself.
        mirror = os.path.join(self.tmp, "repository")
        shutil.copytree(_support.PACKAGE_ROOT, os.path.join(mirror, "client", "python"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", "tests"))
        shutil.copytree(os.path.join(_support.REPO_ROOT, "proto"), os.path.join(mirror, "proto"))
        dist = os.path.join(self.tmp, "dist")
        _run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", self.tmp, "sdist", "--dist-dir", dist],
             os.path.join(mirror, "client", "python"), _environment())
        archives = os.listdir(dist)
        self.assertEqual(len(archives), 1, archives)
        self.assertTrue(archives[0].endswith(".tar.gz"), archives)
        release = archives[0][:-len(".tar.gz")]

        with open(os.path.join(_support.REPO_ROOT, "proto", PROTO_FILE), "rb") as f:
            proto = f.read()
        with tarfile.open(os.path.join(dist, archives[0])) as archive:
            names = archive.getnames()
            self.assertIn("%s/proto/%s" % (release, PROTO_FILE), names)
            self.assertEqual(archive.extractfile("%s/proto/%s" % (release, PROTO_FILE)).read(), proto)
            # Unpacked in a folder of its own, away from the copy above and the repository.
            unpacked = tempfile.mkdtemp(prefix="odeserve-client-sdist-")
            self.addCleanup(shutil.rmtree, unpacked, True)
            archive.extractall(unpacked)
        root = os.path.join(unpacked, release)

        # The unpacked sdist finds its own copy of the proto ...
        found = _run([sys.executable, "-c",
                      "import importlib.util as u; s = u.spec_from_file_location('s', 'odeserve_client/_stubs.py'); "
                      "m = u.module_from_spec(s); s.loader.exec_module(m); print(m.find_proto_dir())"],
                     root, _environment()).split()[-1]
        self.assertEqual(os.path.realpath(found), os.path.realpath(os.path.join(root, "proto")))
        # ... builds, and the built package imports with its generated stubs.
        build_base = os.path.join(unpacked, "build")
        _run([sys.executable, "setup.py", "-q", "build", "--build-base", build_base], root, _environment())
        self.check_built_lib(os.path.join(build_base, "lib"))


if __name__ == "__main__":
    unittest.main()
