"""Build the en -> de translation corpus from DDTP (run `fetch-data` and `build-datasets` first).

    cd models; /usr/bin/python3 -m odeserve_models build-translation-pairs

Pairs come from descriptions that have both an English and a German DDTP text, keyed by
Description-md5, split by SOURCE package exactly as build-datasets splits (the md5 -> split
map is read from sections-{train,valid,test}-en.jsonl, so no description straddles splits):
  - "short": the one-line short descriptions (always aligned);
  - "para":  paragraphs of the long descriptions, only where the alignment is unambiguous:
             both sides have the same number of paragraphs, and every pair's character-length
             ratio lies in [1/2.5, 2.5] (a translator who merged or split paragraphs fails it).
Writes models/data/raw/datasets/translate-{split}-en-de.jsonl (git-ignored) and
models/data/manifest-translation.json (committed: counts, sha256, rules).
"""
import hashlib
import json
import os
import random

from odeserve_models.cli import parser
from odeserve_models.debian import read_translation_paragraphs
from odeserve_models.paths import DATA_DIR

RAW = os.path.join(DATA_DIR, "raw", "text")
OUT = os.path.join(DATA_DIR, "raw", "datasets")
SEED = 20261130
MAX_RATIO = 2.5


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def split_map():
    out = {}
    for split in ("train", "valid", "test"):
        with open(os.path.join(OUT, "sections-%s-en.jsonl" % split), encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                out[r["md5"]] = (split, r["package"])
    return out


def aligned(a, b):
    la, lb = max(len(a), 1), max(len(b), 1)
    return 1.0 / MAX_RATIO <= la / lb <= MAX_RATIO


def main(argv=None) -> int:
    parser("build-translation-pairs", __doc__).parse_args(argv)
    splits = split_map()
    en = read_translation_paragraphs(os.path.join(RAW, "Translation-en"), "en")
    de = read_translation_paragraphs(os.path.join(RAW, "Translation-de"), "de")
    rows = {"train": [], "valid": [], "test": []}
    skipped_paragraphs = 0
    for md5 in sorted(de):
        if md5 not in en or md5 not in splits:
            continue
        split, package = splits[md5]
        (en_short, en_paras), (de_short, de_paras) = en[md5], de[md5]
        if en_short and de_short:
            rows[split].append(dict(md5=md5, package=package, kind="short", en=en_short, de=de_short))
        if len(en_paras) == len(de_paras) and all(aligned(a, b) for a, b in zip(en_paras, de_paras)):
            for i, (a, b) in enumerate(zip(en_paras, de_paras)):
                rows[split].append(dict(md5=md5, package=package, kind="para", index=i, en=a, de=b))
        else:
            skipped_paragraphs += len(en_paras)
    files = {}
    for split, rs in rows.items():
        random.Random(SEED + 3).shuffle(rs)
        path = os.path.join(OUT, "translate-%s-en-de.jsonl" % split)
        with open(path, "w", encoding="utf-8") as f:
            for r in rs:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        files[os.path.basename(path)] = dict(
            rows=len(rs), short=sum(r["kind"] == "short" for r in rs),
            para=sum(r["kind"] == "para" for r in rs), sha256=sha256(path))
    manifest = dict(
        source="DDTP Translation-en + Translation-de of Debian bookworm main (fetch_debian.sh)",
        split="by source package, the md5 -> split map of sections-*-en.jsonl (build-datasets)",
        alignment="short descriptions always; long-description paragraphs only when both sides "
                  "have the same paragraph count and every char-length ratio is within [1/%.1f, %.1f]"
                  % (MAX_RATIO, MAX_RATIO),
        english_paragraphs_skipped_as_ambiguous=skipped_paragraphs, seed=SEED + 3, files=files)
    with open(os.path.join(DATA_DIR, "manifest-translation.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    print(json.dumps(manifest, indent=1))
    return 0
