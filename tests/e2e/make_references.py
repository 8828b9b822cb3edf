#!/usr/bin/python3
"""Reference outputs for the end-to-end tests "Euler at n = L equals the full-depth model" and
"Translate equals the Python beam search".

For every model of the test repository, runs the TorchScript module's own forward() (the model
as trained: L Euler steps inside the module) in Python, on texts tokenized by the Python
mirror of the server's tokenizer, and writes one line per (model, text):
    model<TAB>text<TAB>v1 v2 ...
The C++ end-to-end test sends the same texts through the server with steps = L, solver EULER
and compares. Agreement proves tokenization, EELBERT hashing, padding and the server's solver
loop against PyTorch, across languages and processes.

For TRANSLATION models it writes OUT.translations instead, one line per (model, beam size,
encoder steps, decoder steps, text): the translation and length-normalized score of
odeserve_models.translation.beam_search, the Python mirror of the server's search, with the
server's default output limit:
    model<TAB>beam<TAB>enc_steps<TAB>dec_steps<TAB>text<TAB>translation<TAB>score
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))
from odeserve_models.translation import beam_search, default_max_output_tokens  # noqa: E402
from odeserve_models.verify import load_model_dir  # noqa: E402

TRANSLATION_SETTINGS = [(1, 4, 4), (3, 4, 4), (1, 1, 2), (2, 2, 1)]  # (beam, enc, dec)

TEXTS = [
    "library for reading and writing compressed archives",
    "Werkzeuge zur Verwaltung von Paketen für Debian-Systeme",
    "bibliothèque de traitement d'images, avec des liaisons Python",
    "unknown glyphs ☃ 漢字 and emoji 🚀 still get a vector",
    "x",
]


@torch.no_grad()
def main(repository: str, out_path: str) -> None:
    lines, translations = [], []
    for name in sorted(os.listdir(repository)):
        model_dir = os.path.join(repository, name)
        if not os.path.isfile(os.path.join(model_dir, "config.pbtxt")):
            continue
        cfg, tok, module = load_model_dir(model_dir)
        if cfg["task"] == "TRANSLATION":
            for beam, enc, dec in TRANSLATION_SETTINGS:
                for text in TEXTS:
                    x, mask = tok.batch([text])
                    limit = default_max_output_tokens(x.size(1), cfg["max_len"])
                    (ids, score), = beam_search(module, x, mask, enc, dec, beam, [limit])
                    translations.append("%s\t%d\t%d\t%d\t%s\t%s\t%.9g" % (
                        name, beam, enc, dec, text, tok.sp.decode(ids), score))
            continue
        for text in TEXTS:  # one row per batch: no padding at all on the Python side
            x, mask = tok.batch([text])
            values = module.forward(x, mask)[0].tolist()
            lines.append("%s\t%s\t%s" % (name, text, " ".join("%.9g" % v for v in values)))
    with open(out_path, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    with open(out_path + ".translations", "w", encoding="utf-8") as out:
        out.write("\n".join(translations) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
