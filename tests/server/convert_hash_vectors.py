#!/usr/bin/env python3
"""Converts models/hash_test_vectors.json into a plain text file for tests/server/tokenizer_test.cc.

    convert_hash_vectors.py IN.json OUT.txt

One record per line, whitespace separated, strings as lowercase UTF-8 hex ("-" when empty):
    piece <utf8_hex> <seed> <dim> <n_orders> <order>... <bits>...   (dim float32 bit patterns)
    ngram <utf8_hex> <seed> <fnv1a64 as decimal> <dim> <bits>...
"""
import json
import sys


def hex_or_dash(text):
    data = text.encode("utf-8").hex()
    return data if data else "-"


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        vectors = json.load(f)
    lines = []
    for case in vectors["cases"]:
        assert len(case["bits"]) == case["dim"], case["piece"]
        fields = ["piece", hex_or_dash(case["piece"]), str(case["seed"]), str(case["dim"]),
                  str(len(case["orders"]))] + [str(o) for o in case["orders"]]
        fields += [str(b) for b in case["bits"]]
        lines.append(" ".join(fields))
    for case in vectors["ngram_cases"]:
        assert len(case["bits"]) == case["dim"], case["ngram"]
        fields = ["ngram", hex_or_dash(case["ngram"]), str(case["seed"]),
                  str(int(case["fnv1a64"], 16)), str(case["dim"])] + [str(b) for b in case["bits"]]
        lines.append(" ".join(fields))
    with open(dst, "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
