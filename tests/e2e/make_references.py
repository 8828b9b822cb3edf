#!/usr/bin/python3
"""Reference outputs for the end-to-end test "Euler at n = L equals the full-depth model".

For every model of the test repository, runs the TorchScript module's own forward() (the model
as trained: L Euler steps inside the module) in Python, on texts tokenized by the Python
mirror of the server's tokenizer, and writes one line per (model, text):
    model<TAB>text<TAB>v1 v2 ...
The C++ end-to-end test sends the same texts through the server with steps = L, solver EULER
and compares. Agreement proves tokenization, EELBERT hashing, padding and the server's solver
loop against PyTorch, across languages and processes.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))
from odeserve_models.verify import load_model_dir  # noqa: E402

TEXTS = [
    "library for reading and writing compressed archives",
    "Werkzeuge zur Verwaltung von Paketen für Debian-Systeme",
    "bibliothèque de traitement d'images, avec des liaisons Python",
    "unknown glyphs ☃ 漢字 and emoji 🚀 still get a vector",
    "x",
]


@torch.no_grad()
def main(repository: str, out_path: str) -> None:
    lines = []
    for name in sorted(os.listdir(repository)):
        model_dir = os.path.join(repository, name)
        if not os.path.isfile(os.path.join(model_dir, "config.pbtxt")):
            continue
        cfg, tok, module = load_model_dir(model_dir)
        for text in TEXTS:  # one row per batch: no padding at all on the Python side
            x, mask = tok.batch([text])
            values = module.forward(x, mask)[0].tolist()
            lines.append("%s\t%s\t%s" % (name, text, " ".join("%.9g" % v for v in values)))
    with open(out_path, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
