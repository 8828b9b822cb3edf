"""Masked-LM pre-training pieces for the encoder families (models/odeserve_models/train/train.py --objective mlm).

BERT-style masking: each maskable position (not BOS/EOS/pad) is chosen with probability p; a
chosen position becomes the mask input 80% of the time, a random piece 10%, itself 10%, and
its original piece is the target. Token families (ALBERT, ShareBERT) mask with the unknown
piece's id and predict through their own embedding table (tied output); EELBERT has no table,
so a masked piece gets all-zero hash features (piece-table index 0) and a separate output layer
predicts the SentencePiece id. The head exists only for training: nothing of it is exported.
"""
import random
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from . import families


def mask_sequences(seqs: Sequence[List[int]], rng: random.Random, maskable, mask_input: int,
                   random_input, target_of, p: float = 0.15) -> Tuple[List[List[int]], List[Tuple[int, int, int]]]:
    """-> (masked copies of seqs, [(row, position, target id)]). maskable(i) says whether input
    value i may be masked; random_input() draws a replacement; target_of(i) is the id to predict.
    Every sequence with a maskable position gets at least one target."""
    out, targets = [], []
    for row, seq in enumerate(seqs):
        seq = list(seq)
        positions = [t for t, v in enumerate(seq) if maskable(v)]
        chosen = [t for t in positions if rng.random() < p]
        if not chosen and positions:
            chosen = [rng.choice(positions)]
        for t in chosen:
            targets.append((row, t, target_of(seq[t])))
            r = rng.random()
            if r < 0.8:
                seq[t] = mask_input
            elif r < 0.9:
                seq[t] = random_input()
        out.append(seq)
    return out, targets


class MlmHead(nn.Module):
    """Transform (dense, GELU, LayerNorm) then the vocabulary: tied to the family's embedding
    table where it has one (ShareBERT's E, ALBERT's tok), a separate layer otherwise (EELBERT)."""

    def __init__(self, model: families.SharedEncoderBase, vocab: int):
        super().__init__()
        hidden = model.hidden_size
        self.dense = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)
        table = self.table_of(model)
        self.tied = table is not None
        self.out = nn.Linear(hidden, table.size(1) if self.tied else vocab)
        self.bias = nn.Parameter(torch.zeros(vocab)) if self.tied else None

    @staticmethod
    def table_of(model: families.SharedEncoderBase) -> Optional[Tensor]:
        if isinstance(model, families.ShareBertEncoder):
            return model.E
        if isinstance(model, families.AlbertEncoder):
            return model.tok
        return None

    def forward(self, states: Tensor, model: families.SharedEncoderBase) -> Tensor:
        # float32 into the LayerNorm: under CPU autocast its weights stay float32
        z = self.out(self.norm(F.gelu(self.dense(states)).float()))
        if self.tied:
            return z @ self.table_of(model).t() + self.bias
        return z


def integrate(model: families.SharedEncoderBase, x: Tensor, mask: Tensor, n: int) -> Tensor:
    """Training forward to the ODE's end: input stage, then n Euler steps of dt = L/n, as the
    server runs it (ShareBERT's block matrices materialized with gradients, once per batch)."""
    if isinstance(model, families.ShareBertEncoder):
        model.train_prepare()
    h = model.input_stage(x, mask)
    dt = model.trained_depth / n
    for _ in range(n):
        h = h + dt * model.vector_field(h, mask)
    return h


def token_states(model: families.SharedEncoderBase, x: Tensor, mask: Tensor, n: int) -> Tensor:
    """Per-token states after n Euler steps of dt = L/n and the suffix layers and final
    LayerNorm that pool() applies: [B, T, H]."""
    h = integrate(model, x, mask, n)
    if len(model.suffix) > 0:
        bias = families.mask_bias(mask)
        for layer in model.suffix:
            h = layer(h, bias)
    return F.layer_norm(h, [model.hidden_size], model.ln_f_w, model.ln_f_b, 1e-5)


def mlm_logits(model, head: MlmHead, x: Tensor, mask: Tensor, n: int, targets) -> Tuple[Tensor, Tensor]:
    """Logits [K, V] at the K target positions and the target ids [K]."""
    states = token_states(model, x, mask, n)
    rows = torch.tensor([r for r, _, _ in targets])
    cols = torch.tensor([c for _, c, _ in targets])
    return head(states[rows, cols], model), torch.tensor([t for _, _, t in targets])
