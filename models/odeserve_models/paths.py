"""Where the model tools read and write: absolute paths, so that a command works from any directory."""
import os

MODELS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # models/
ROOT = os.path.dirname(MODELS)                      # the repository root
REPOSITORY = os.path.join(MODELS, "repository")     # the served model folders (committed)
DATA_DIR = os.path.join(MODELS, "data")             # manifests (committed), raw/ (fetched, git-ignored)
WORK = os.path.join(MODELS, "work")                 # runs, eval files, logs (git-ignored)
PROTO = os.path.join(ROOT, "proto")
