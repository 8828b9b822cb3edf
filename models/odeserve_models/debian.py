"""Parse Debian Packages / DDTP Translation-xx files (deb822 stanzas)."""
import re
from typing import Dict, Iterator, List, Tuple


def stanzas(path: str) -> Iterator[Dict[str, str]]:
    cur: Dict[str, str] = {}
    key = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                if cur:
                    yield cur
                cur, key = {}, None
                continue
            if line[0] in " \t" and key is not None:
                cur[key] += "\n" + line
                continue
            k, _, v = line.partition(":")
            key = k
            cur[k] = v.strip()
    if cur:
        yield cur


def description_paragraphs(raw: str) -> Tuple[str, List[str]]:
    """'short\\n long...' -> (short, [paragraph, ...]), continuation lines unwrapped; a " ."
    line separates paragraphs."""
    lines = raw.split("\n")
    short = lines[0].strip()
    paras: List[str] = []
    cur: List[str] = []
    for ln in lines[1:]:
        s = ln.strip()
        if s == ".":
            if cur:
                paras.append(" ".join(cur)); cur = []
        elif s:
            cur.append(s)
    if cur:
        paras.append(" ".join(cur))
    return short, [re.sub(r"\s+", " ", p).strip() for p in paras]


def split_description(raw: str) -> Tuple[str, str]:
    """'short\\n long...' -> (short, long) with deb822 continuation lines unwrapped."""
    short, paras = description_paragraphs(raw)
    long = " ".join(paras)
    long = re.sub(r"\s+", " ", long).strip()
    return short, long


def full_text(short: str, long: str) -> str:
    return (short + ". " + long).strip() if long else short


def read_packages(path: str) -> List[Dict[str, str]]:
    out = []
    for st in stanzas(path):
        src = st.get("Source", st.get("Package", "")).split(" ")[0]
        out.append({"package": st.get("Package", ""), "source": src,
                    "section": st.get("Section", "").split("/")[-1],
                    "md5": st.get("Description-md5", "")})
    return out


def read_translations(path: str, lang: str) -> Dict[str, Tuple[str, str]]:
    """Description-md5 -> (short, long)."""
    out: Dict[str, Tuple[str, str]] = {}
    for st in stanzas(path):
        md5 = st.get("Description-md5")
        raw = st.get("Description-" + lang)
        if md5 and raw is not None and md5 not in out:
            out[md5] = split_description(raw)
    return out


def read_translation_paragraphs(path: str, lang: str) -> Dict[str, Tuple[str, List[str]]]:
    """Description-md5 -> (short, [paragraph, ...])."""
    out: Dict[str, Tuple[str, List[str]]] = {}
    for st in stanzas(path):
        md5 = st.get("Description-md5")
        raw = st.get("Description-" + lang)
        if md5 and raw is not None and md5 not in out:
            out[md5] = description_paragraphs(raw)
    return out
