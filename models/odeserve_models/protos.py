"""protoc's Python modules for proto/odeserve/v1 (odeserve.v1.model_config_pb2, inference_pb2,
inference_pb2_grpc), generated at run time into a temporary folder and imported from there without
putting that folder on sys.path: the packages `odeserve` and `odeserve.v1` are registered in
sys.modules with the folder's subfolders as their __path__, so the generated modules' own imports
(`from odeserve.v1 import ...`) resolve to the same folder."""
import importlib
import os
import sys
import types
from typing import List


def import_generated(folder: str, modules: List[str]) -> list:
    """The modules odeserve.v1.<name> for each name of `modules`, from protoc's --python_out/--grpc_out
    `folder`. Any odeserve.* modules imported before are forgotten first (the objects stay valid)."""
    forget()
    for name, sub in (("odeserve", ("odeserve",)), ("odeserve.v1", ("odeserve", "v1"))):
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(folder, *sub)]
        sys.modules[name] = package
    return [importlib.import_module("odeserve.v1." + m) for m in modules]


def forget() -> None:
    """Drops odeserve.* from sys.modules, so that a later import reads a new folder."""
    for name in [k for k in sys.modules if k == "odeserve" or k.startswith("odeserve.")]:
        del sys.modules[name]
