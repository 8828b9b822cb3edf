"""Extract the small committed text sample tests/fixtures/descriptions-sample.txt from the
fetched Debian data (run after `fetch-data`). Deterministic (fixed seed).

    cd models; /usr/bin/python3 -m odeserve_models make-fixture-sample
"""
import os
import random

from odeserve_models.cli import parser
from odeserve_models.debian import full_text, read_translations
from odeserve_models.paths import DATA_DIR, ROOT

RAW = os.path.join(DATA_DIR, "raw", "text")
OUT = os.path.join(ROOT, "tests", "fixtures", "descriptions-sample.txt")


def main(argv=None) -> int:
    parser("make-fixture-sample", __doc__).parse_args(argv)
    rng = random.Random(20261130)
    lines = []
    for lang, n in (("en", 300), ("de", 40), ("fr", 40), ("it", 20), ("da", 20)):
        tr = read_translations(os.path.join(RAW, "Translation-" + lang), lang)
        keys = sorted(tr)
        rng.shuffle(keys)
        for k in keys[:n]:
            t = full_text(*tr[k]).replace("\t", " ")
            if len(t) > 240:
                t = t[:240].rsplit(" ", 1)[0]
            lines.append(t)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(OUT, len(lines), "lines", os.path.getsize(OUT), "bytes")
    return 0
