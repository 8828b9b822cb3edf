"""models/train/*.py are scripts, not a package: their tests load one as a module by name."""
import importlib.util
import pathlib

TRAIN = pathlib.Path(__file__).resolve().parents[2] / "models" / "train"


def load_trainer(name: str):
    """models/train/<name>.py as a module (its main() is not run)."""
    spec = importlib.util.spec_from_file_location(name, TRAIN / (name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
