"""Tokenization exactly as the server does it (docs/MODEL_CONTRACT.md, "Tokenization")."""
from typing import List, Optional, Sequence, Tuple

import numpy as np
import sentencepiece as spm
import torch

from .hashing import PieceHasher


def train_sentencepiece(input_path: str, prefix: str, vocab_size: int, **extra) -> str:
    args = dict(input=input_path, model_prefix=prefix, vocab_size=vocab_size, model_type="unigram",
                character_coverage=0.9995, pad_id=0, unk_id=1, bos_id=2, eos_id=3,
                pad_piece="<pad>", unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
                num_threads=1, minloglevel=2, hard_vocab_limit=False)
    args.update(extra)
    spm.SentencePieceTrainer.train(**args)
    return prefix + ".model"


class Tokenizer:
    def __init__(self, model_file: str, max_len: int, add_bos: bool = True, add_eos: bool = True,
                 hasher: Optional[PieceHasher] = None):
        self.sp = spm.SentencePieceProcessor(model_file=model_file)
        self.max_len, self.add_bos, self.add_eos = max_len, add_bos, add_eos
        self.hasher = hasher
        self.pad = self.sp.pad_id()

    def _cut(self, seq: list, bos, eos) -> list:
        room = self.max_len - int(self.add_bos) - int(self.add_eos)
        seq = seq[:room]
        return ([bos] if self.add_bos else []) + seq + ([eos] if self.add_eos else [])

    def ids(self, text: str) -> List[int]:
        return self._cut(self.sp.encode(text, out_type=int), self.sp.bos_id(), self.sp.eos_id())

    def pieces(self, text: str) -> List[str]:
        return self._cut(self.sp.encode(text, out_type=str), "<s>", "</s>")

    def batch(self, texts: Sequence[str], pad_to: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
        """-> (x, mask): x int64 [B,T] ids, or float32 [B,T,dim] hash features if hasher set."""
        if self.hasher is None:
            seqs = [self.ids(t) for t in texts]
        else:
            seqs = [self.pieces(t) for t in texts]
        T = max(max(len(s) for s in seqs), pad_to)
        mask = np.zeros((len(seqs), T), dtype=np.float32)
        for i, s in enumerate(seqs):
            mask[i, :len(s)] = 1.0
        if self.hasher is None:
            x = np.full((len(seqs), T), self.pad, dtype=np.int64)
            for i, s in enumerate(seqs):
                x[i, :len(s)] = s
        else:
            x = self.hasher.features(seqs, T)
        return torch.from_numpy(x), torch.from_numpy(mask)
