"""Extract the small committed text sample tests/fixtures/descriptions-sample.txt from the
fetched Debian data (run after fetch_debian.sh). Deterministic (fixed seed)."""
import os, random, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from odeserve_models.debian import read_translations, full_text

HERE = os.path.dirname(os.path.abspath(__file__))
RAW = os.path.join(HERE, "raw", "text")
OUT = os.path.join(HERE, "..", "..", "tests", "fixtures", "descriptions-sample.txt")


def main():
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


if __name__ == "__main__":
    main()
