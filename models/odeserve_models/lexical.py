"""A classifier with two experts: the parameter-shared encoder and a bag of SentencePiece pieces.

The encoder generalizes across languages but fits its English training descriptions far better
than new ones (models/EVAL.md); a linear model over piece unigrams and hashed piece bigrams is the
strong English baseline. The classifier multiplies their distributions (a product of experts):

    logits = log_softmax(encoder(x)) + weight * log_softmax(lexical(x))

The lexical expert rides inside the ODE state, so the server's contract, solver loop, batching and
step choice are untouched: input_stage appends C channels (each piece's class scores) to the
encoder's state, vector_field gives those channels zero derivative (every solver keeps them), and
output_stage pools them. Only token-id encoders (ShareBERT, ALBERT) can carry it.
"""
from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .families import SharedEncoderBase

# A bigram (a, b) of ids < vocab is the bucket (a * vocab + b) mod buckets: a prime count, so that
# the fold spreads every id range.
DEFAULT_BUCKETS = 65521


def bigram_buckets(x: Tensor, mask: Tensor, vocab: int, buckets: int) -> Tensor:
    """[B, T] ids -> [B, T] bucket of (piece t, piece t+1); the last piece pairs with id 0 whatever
    the batch's padding, so a row's features never depend on the rows batched with it."""
    nxt = torch.zeros_like(x)
    nxt[:, :-1] = x[:, 1:] * (mask[:, 1:] > 0).to(x.dtype)
    return (x * vocab + nxt) % buckets


def feature_rows(ids: List[int], vocab: int, buckets: int) -> List[int]:
    """The rows of the lexical table that one tokenized text (bos/eos included) sums: the same
    features as LexicalClassifier.input_stage, for training with an EmbeddingBag."""
    nxt = ids[1:] + [0]
    return list(ids) + [vocab + (a * vocab + b) % buckets for a, b in zip(ids, nxt)]


class LexicalClassifier(nn.Module):
    family: str

    def __init__(self, encoder: SharedEncoderBase, vocab: int, classes: int,
                 buckets: int = DEFAULT_BUCKETS, weight: float = 1.0, length_power: float = 0.5):
        super().__init__()
        self.encoder = encoder
        self.family = encoder.family
        self.trained_depth = encoder.trained_depth
        self.hidden_size = encoder.hidden_size
        self.num_heads = encoder.num_heads
        self.ffn_size = encoder.ffn_size
        self.max_len = encoder.max_len
        self.out_dim = encoder.out_dim
        self.vocab = vocab
        self.buckets = buckets
        self.classes = classes
        # per-piece class scores: vocab unigram rows, then `buckets` hashed bigram rows
        self.lexical = nn.Parameter(torch.zeros(vocab + buckets, classes))
        self.lexical_bias = nn.Parameter(torch.zeros(classes))
        self.weight = weight
        # the pooled scores are divided by (pieces ** length_power): 0.5 is TF-IDF's L2 norm of
        # a bag of distinct pieces, 1 the mean
        self.length_power = length_power

    @torch.jit.export
    def prepare(self) -> None:
        self.encoder.prepare()

    def lexical_scores(self, x: Tensor, mask: Tensor) -> Tensor:
        """[B, T] ids -> [B, T, C] class scores of each piece and of its bigram with the next."""
        rows = F.embedding(x, self.lexical) + F.embedding(
            self.vocab + bigram_buckets(x, mask, self.vocab, self.buckets), self.lexical)
        return rows * mask.unsqueeze(-1)

    @torch.jit.export
    def input_stage(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.encoder.input_stage(x, mask)
        return torch.cat([h, self.lexical_scores(x, mask).to(h.dtype)], dim=-1)

    @torch.jit.export
    def vector_field(self, h: Tensor, mask: Tensor) -> Tensor:
        f = self.encoder.vector_field(h[:, :, :self.hidden_size], mask)
        return torch.cat([f, f.new_zeros([h.size(0), h.size(1), self.classes])], dim=-1)

    @torch.jit.export
    def experts(self, h: Tensor, mask: Tensor) -> Tuple[Tensor, Tensor]:
        """(encoder log-probabilities, lexical log-probabilities), each [B, C]."""
        deep = self.encoder.output_stage(h[:, :, :self.hidden_size], mask)
        m = mask.unsqueeze(-1)
        pieces = m.sum(1).clamp(min=1.0)
        pooled = (h[:, :, self.hidden_size:].float() * m).sum(1) / pieces.pow(self.length_power)
        return F.log_softmax(deep.float(), dim=-1), F.log_softmax(pooled + self.lexical_bias, dim=-1)

    @torch.jit.export
    def output_stage(self, h: Tensor, mask: Tensor) -> Tensor:
        deep, lexical = self.experts(h, mask)
        return deep + self.weight * lexical

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.input_stage(x, mask)
        for _ in range(self.trained_depth):
            h = h + self.vector_field(h, mask)
        return self.output_stage(h, mask)
