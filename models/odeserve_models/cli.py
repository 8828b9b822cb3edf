"""The command line of a `python3 -m odeserve_models <command>`: its parser (the usage names the
command, --help shows the module's docstring: what it does, with an example), the command as typed
(for the records the evaluations write), and the re-run under a pinned string hash seed that the
byte-identical exports need."""
import argparse
import os
import sys
from typing import List, Optional

from .paths import MODELS, ROOT

PROG = "python3 -m odeserve_models"
# The scripts whose sys.argv the evaluation files written before the package recorded.
OLD_SCRIPTS = {"eval_served.py": "evaluate-served", "eval_translation.py": "evaluate-translation"}


def parser(command: str, doc: Optional[str]) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog="%s %s" % (PROG, command), description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def command_line(command: str, argv: Optional[List[str]]) -> str:
    """The command as typed, as a line to run from the repository root (its arguments' relative
    paths kept valid), for the records the evaluations write."""
    line = " ".join(["/usr/bin/python3 -m odeserve_models", command] + list(sys.argv[1:] if argv is None else argv))
    here = os.path.relpath(os.getcwd(), ROOT)
    if here == "models":
        return "cd models; " + line
    if here == ".":
        return "PYTHONPATH=models " + line
    return "cd %s; PYTHONPATH=%s %s" % (os.getcwd(), MODELS, line)


def shell_line(recorded: str) -> str:
    """A recorded command as a line to run from the repository root: command_line()'s records as
    they are; the records written before the package (the sys.argv of the eval_served.py and
    eval_translation.py scripts that evaluate-served and evaluate-translation replaced, typed from
    the repository root as models/<script>, or from models/) as the command."""
    if recorded.startswith(("cd ", "PYTHONPATH=")):
        return recorded
    script, _, args = recorded.partition(" ")
    name = os.path.basename(script)
    line = "/usr/bin/python3 -m odeserve_models %s %s" % (OLD_SCRIPTS.get(name, name), args)
    return ("PYTHONPATH=models " if os.path.dirname(script) else "cd models; ") + line


def pin_hash_seed(command: str, argv: Optional[List[str]]) -> None:
    """Returns only under PYTHONHASHSEED=0; otherwise replaces this process by the same command
    under it. TorchScript writes some module constants in set order, which depends on Python's
    string hash seed: pinned, model.pt is byte-identical from run to run."""
    if os.environ.get("PYTHONHASHSEED") == "0":
        return
    models = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONHASHSEED="0",
               PYTHONPATH=os.pathsep.join(p for p in (models, os.environ.get("PYTHONPATH")) if p))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "odeserve_models", command] +
              list(sys.argv[1:] if argv is None else argv), env)
