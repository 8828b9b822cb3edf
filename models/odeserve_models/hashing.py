"""EELBERT hashed character n-gram features, bit-identical to the C++ server.

Exactly as docs/MODEL_CONTRACT.md ("EELBERT hashed n-gram features"):
for a piece p, w = "<" + p + ">" (code points); for each order n (given order) and start i
(ascending) the n-gram g = w[i:i+n]; h = FNV-1a 64 over seed (4 bytes LE) + UTF-8(g);
splitmix64 stream from h gives dim values (z >> 40) / 2^24 * 2 - 1; the feature is the
float64 mean over n-grams (summed in order), rounded to float32. Pads are all zeros.
"""
import struct
from typing import Dict, Iterable, List, Sequence

import numpy as np

MASK64 = (1 << 64) - 1
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
GOLDEN = 0x9E3779B97F4A7C15
M1 = 0xBF58476D1CE4E5B9
M2 = 0x94D049BB133111EB


def fnv1a64(data: bytes) -> int:
    h = FNV_OFFSET
    for b in data:
        h ^= b
        h = (h * FNV_PRIME) & MASK64
    return h


def ngram_vector(gram: str, seed: int, dim: int) -> List[float]:
    """phi(g): dim values in [-1, 1), each exactly representable in float32."""
    state = fnv1a64(struct.pack("<I", seed & 0xFFFFFFFF) + gram.encode("utf-8"))
    out = []
    for _ in range(dim):
        state = (state + GOLDEN) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * M1) & MASK64
        z = ((z ^ (z >> 27)) * M2) & MASK64
        z = z ^ (z >> 31)
        out.append((z >> 40) / 16777216.0 * 2.0 - 1.0)
    return out


def ngrams(piece: str, orders: Sequence[int]) -> List[str]:
    w = "<" + piece + ">"
    grams = []
    for n in orders:
        if n > len(w) or n <= 0:
            continue
        for i in range(0, len(w) - n + 1):
            grams.append(w[i:i + n])
    return grams


def piece_feature(piece: str, seed: int, dim: int, orders: Sequence[int]) -> np.ndarray:
    """float32 [dim] feature of one piece (all zeros if it has no n-gram)."""
    grams = ngrams(piece, orders)
    acc = [0.0] * dim  # python floats are float64; summed in n-gram order
    for g in grams:
        v = ngram_vector(g, seed, dim)
        for j in range(dim):
            acc[j] += v[j]
    if not grams:
        return np.zeros(dim, dtype=np.float32)
    cnt = float(len(grams))
    return np.array([a / cnt for a in acc], dtype=np.float64).astype(np.float32)


class PieceHasher:
    """Caches piece -> feature (the server may keep an LRU cache of the same)."""

    def __init__(self, seed: int, dim: int, orders: Sequence[int]):
        self.seed, self.dim, self.orders = int(seed), int(dim), list(orders)
        self.cache: Dict[str, np.ndarray] = {}

    def __call__(self, piece: str) -> np.ndarray:
        f = self.cache.get(piece)
        if f is None:
            f = piece_feature(piece, self.seed, self.dim, self.orders)
            self.cache[piece] = f
        return f

    def features(self, pieces_batch: Iterable[List[str]], max_len: int) -> np.ndarray:
        pieces_batch = list(pieces_batch)
        out = np.zeros((len(pieces_batch), max_len, self.dim), dtype=np.float32)
        for b, pieces in enumerate(pieces_batch):
            for t, p in enumerate(pieces[:max_len]):
                out[b, t] = self(p)
        return out


def float32_bits(x: np.ndarray) -> List[int]:
    return [int(v) for v in np.asarray(x, dtype=np.float32).view(np.uint32)]
