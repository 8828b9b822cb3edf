"""Dataset loading and pre-tokenization for training/evaluation."""
import json
import os
import random
from typing import Dict, List, Optional

import numpy as np
import torch

from .hashing import PieceHasher
from .text import Tokenizer

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "raw", "datasets")


def load_jsonl(name: str, limit: Optional[int] = None) -> List[Dict]:
    rows = []
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        for line in f:
            rows.append(json.loads(line))
            if limit is not None and len(rows) >= limit:
                break
    return rows


ZERO_SHOT_LANGUAGES = ("de", "fr", "it", "da")  # the translated test and validation sets of classification


def classifier_validation_sets(label_index: Dict[str, int], zero_shot_rows: int, seed: int,
                               languages=ZERO_SHOT_LANGUAGES) -> Dict[str, tuple]:
    """The validation sets a classifier's product-of-experts weights are chosen on (train-lexical,
    train-embedding-probe): name -> (texts, labels). "choose" and "check" are the two halves of
    the English validation split, in file order; each language's set is `zero_shot_rows`
    translations of validation packages (shuffled with `seed`), labelled with their section."""
    valid = load_jsonl("sections-valid-en.jsonl")
    half = len(valid) // 2
    sets = {"choose": valid[:half], "check": valid[half:]}
    out = {name: ([r["text"] for r in rows], np.array([label_index[r["label"]] for r in rows]))
           for name, rows in sets.items()}
    for lang in languages:
        rows = load_jsonl("pairs-valid-%s.jsonl" % lang)
        random.Random(seed).shuffle(rows)
        rows = rows[:zero_shot_rows]
        out[lang] = ([r["xx"] for r in rows], np.array([label_index[r["label"]] for r in rows]))
    return out


def validation_objective(accuracy, steps, languages=ZERO_SHOT_LANGUAGES) -> float:
    """What the product-of-experts weights are chosen by: the mean over `steps` of (English
    accuracy on "choose" + mean zero-shot accuracy) / 2; accuracy(set name, steps) -> float."""
    return float(np.mean([(accuracy("choose", n) + np.mean([accuracy(l, n) for l in languages])) / 2 for n in steps]))


def translation_pairs(split: str, kind: Optional[str] = None) -> List[Dict]:
    """en -> de pairs of odeserve_models/datasets/build_translation_pairs.py; kind "short" or "para" (None: both)."""
    return [r for r in load_jsonl("translate-%s-en-de.jsonl" % split) if kind is None or r["kind"] == kind]


class Encoded:
    """Texts tokenized once: token ids (TOKEN_IDS) or indices into a piece-feature table
    (HASHED_NGRAMS; features of each distinct piece string computed once)."""

    def __init__(self, tok: Tokenizer):
        self.tok = tok
        self.hashed = tok.hasher is not None
        self.piece_index: Dict[str, int] = {"": 0}  # index 0 = pad (all-zero feature)
        self.table_rows: List[np.ndarray] = [np.zeros(tok.hasher.dim, np.float32)] if self.hashed else []
        self._table: Optional[torch.Tensor] = None

    def encode(self, texts: List[str]) -> List[List[int]]:
        out = []
        for t in texts:
            if not self.hashed:
                out.append(self.tok.ids(t))
            else:
                seq = []
                for p in self.tok.pieces(t):
                    i = self.piece_index.get(p)
                    if i is None:
                        i = len(self.table_rows)
                        self.piece_index[p] = i
                        self.table_rows.append(self.tok.hasher(p))
                        self._table = None
                    seq.append(i)
                out.append(seq)
        return out

    def table(self) -> torch.Tensor:
        if self._table is None:
            self._table = torch.from_numpy(np.stack(self.table_rows))
        return self._table

    def collate(self, seqs: List[List[int]]):
        T = max(len(s) for s in seqs)
        ids = torch.zeros(len(seqs), T, dtype=torch.long)
        if not self.hashed:
            ids.fill_(self.tok.pad)
        mask = torch.zeros(len(seqs), T)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
            mask[i, :len(s)] = 1.0
        if self.hashed:
            return self.table()[ids], mask
        return ids, mask
