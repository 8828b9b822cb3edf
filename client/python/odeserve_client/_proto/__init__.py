"""The generated odeserve.v1 stubs: ``inference_pb2`` and ``inference_pb2_grpc``.

An installed package (``pip install ./client/python``) carries them in this folder, generated
at build time. Run from the source tree (client/python on sys.path) the folder holds only this
file: the stubs are then generated from the repository's proto/ on first import into a cache
folder (see ``odeserve_client._stubs.ensure_cached``), which is added to this package's path.
"""
import os

if not os.path.isfile(os.path.join(os.path.dirname(os.path.abspath(__file__)), "inference_pb2.py")):
    from .. import _stubs

    STUB_DIR = _stubs.ensure_cached()
    __path__.append(STUB_DIR)  # noqa: F821 - the package's own search path
else:
    STUB_DIR = os.path.dirname(os.path.abspath(__file__))
