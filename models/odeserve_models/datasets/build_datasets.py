"""Build reproducible datasets from the fetched Debian files (run `fetch-data` first).

    cd models; /usr/bin/python3 -m odeserve_models build-datasets

Writes models/data/raw/datasets/*.jsonl (git-ignored) and models/data/manifest.json (committed:
counts and sha256 of every file, label set, split rule).
 (a) sections-{train,valid,test}-en.jsonl: English description -> Section (sections with
     >= MIN_SECTION binary packages keep their name, the rest are "other").
 (b) pairs-{train,valid,test}-{lang}.jsonl: en <-> xx descriptions keyed by Description-md5.
 (c) sections-test-{lang}.jsonl: translated descriptions (de, fr, it, da) of TEST packages with
     their section, for zero-shot cross-lingual classification.
 tokenizer-corpus.txt: multilingual training-split text for SentencePiece.
Split by SOURCE package (seeded shuffle of sorted source names, 80/10/10), descriptions
deduplicated by Description-md5 with test > valid > train precedence.
"""
import hashlib
import json
import os
import random
from collections import Counter, defaultdict

from odeserve_models.cli import parser
from odeserve_models.debian import full_text, read_packages, read_translations
from odeserve_models.paths import DATA_DIR

RAW = os.path.join(DATA_DIR, "raw", "text")
OUT = os.path.join(DATA_DIR, "raw", "datasets")
SEED = 20261130
MIN_SECTION = 500
EVAL_LANGS = ["de", "fr", "it", "da"]
PAIR_LANGS = ["de", "fr", "it", "da", "es", "pt", "ru", "pl", "ja", "cs", "nl", "fi", "sv"]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main(argv=None) -> int:
    parser("build-datasets", __doc__).parse_args(argv)
    os.makedirs(OUT, exist_ok=True)
    pkgs = read_packages(os.path.join(RAW, "Packages"))
    en = read_translations(os.path.join(RAW, "Translation-en"), "en")
    counts = Counter(p["section"] for p in pkgs)
    keep = sorted(s for s, c in counts.items() if c >= MIN_SECTION)
    labels = keep + ["other"]
    sources = sorted({p["source"] for p in pkgs})
    rng = random.Random(SEED)
    rng.shuffle(sources)
    n = len(sources)
    split_of = {}
    for i, s in enumerate(sources):
        split_of[s] = "train" if i < 0.8 * n else ("valid" if i < 0.9 * n else "test")
    # md5 -> (split, section, package); test > valid > train precedence
    prio = {"test": 0, "valid": 1, "train": 2}
    by_md5 = {}
    for p in sorted(pkgs, key=lambda p: p["package"]):
        if not p["md5"] or p["md5"] not in en:
            continue
        sec = p["section"] if p["section"] in keep else "other"
        cand = (split_of[p["source"]], sec, p["package"], p["source"])
        cur = by_md5.get(p["md5"])
        if cur is None or prio[cand[0]] < prio[cur[0]]:
            by_md5[p["md5"]] = cand
    rows = defaultdict(list)
    for md5 in sorted(by_md5):
        split, sec, pkg, src = by_md5[md5]
        short, long = en[md5]
        rows[split].append(dict(md5=md5, package=pkg, source=src, label=sec,
                                text=full_text(short, long), short=short, long=long))
    files = {}
    for split in ("train", "valid", "test"):
        random.Random(SEED + 1).shuffle(rows[split])
        path = os.path.join(OUT, "sections-%s-en.jsonl" % split)
        write_jsonl(path, [{k: r[k] for k in ("md5", "package", "source", "label", "text", "short", "long")} for r in rows[split]])
        files[os.path.basename(path)] = len(rows[split])
    corpus = [r["text"] for r in rows["train"]]
    for lang in PAIR_LANGS:
        path_tr = os.path.join(RAW, "Translation-" + lang)
        if not os.path.exists(path_tr):
            continue
        tr = read_translations(path_tr, lang)
        for split in ("train", "valid", "test"):
            pr = []
            for r in rows[split]:
                t = tr.get(r["md5"])
                if t is None:
                    continue
                pr.append(dict(md5=r["md5"], package=r["package"], label=r["label"], en=r["text"],
                               xx=full_text(*t), lang=lang))
            path = os.path.join(OUT, "pairs-%s-%s.jsonl" % (split, lang))
            write_jsonl(path, pr)
            files[os.path.basename(path)] = len(pr)
            if split == "train":
                corpus.extend(p["xx"] for p in pr)
            if split == "test" and lang in EVAL_LANGS:
                path = os.path.join(OUT, "sections-test-%s.jsonl" % lang)
                write_jsonl(path, [dict(md5=p["md5"], package=p["package"], label=p["label"], text=p["xx"]) for p in pr])
                files[os.path.basename(path)] = len(pr)
    random.Random(SEED + 2).shuffle(corpus)
    path = os.path.join(OUT, "tokenizer-corpus.txt")
    with open(path, "w", encoding="utf-8") as f:
        for t in corpus:
            f.write(t.replace("\n", " ") + "\n")
    files[os.path.basename(path)] = len(corpus)
    label_counts = {s: dict(Counter(r["label"] for r in rows[s])) for s in ("train", "valid", "test")}
    manifest = dict(
        source="Debian bookworm main: Packages + DDTP Translation-xx (fetched by models/data/fetch_debian.sh)",
        inputs={os.path.basename(p): sha256(os.path.join(RAW, p)) for p in sorted(os.listdir(RAW))},
        seed=SEED, min_section=MIN_SECTION, labels=labels,
        split="by source package: seeded shuffle of sorted names, 80/10/10; md5 dedup test>valid>train",
        files={k: dict(rows=v, sha256=sha256(os.path.join(OUT, k))) for k, v in sorted(files.items())},
        label_counts=label_counts)
    with open(os.path.join(DATA_DIR, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    print(json.dumps({k: v for k, v in sorted(files.items())}, indent=0))
    print("labels", len(labels), labels)
    return 0
