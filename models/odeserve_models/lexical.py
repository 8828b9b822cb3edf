"""A classifier with two experts: the parameter-shared encoder and a bag of SentencePiece pieces.

The encoder generalizes across languages but fits its English training descriptions far better
than new ones (models/EVAL.md); a linear model over piece unigrams and hashed piece bigrams is the
strong English baseline. The classifier multiplies their distributions (a product of experts):

    logits = log_softmax(encoder(x)) + weight * log_softmax(lexical(x))

The lexical expert rides inside the ODE state, so the server's contract, solver loop, batching and
step choice are untouched: input_stage appends C channels (each piece's class scores) to the
encoder's state, vector_field gives those channels zero derivative (every solver keeps them), and
output_stage pools them. Only token-id encoders (ShareBERT, ALBERT) can carry it.

EmbeddingProbeClassifier (the served classify-sections) adds a third expert for other languages:
a linear probe on the sentence embedding of embed-eelbert's encoder, whose own state and field
ride in the same ODE state.
"""
from typing import List, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .families import EelbertEncoder, SharedEncoderBase
from .hashing import PieceHasher

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


def piece_feature_table(tokenizer_file: str, seed: int, dim: int, orders: List[int]) -> Tensor:
    """[vocab, dim]: the EELBERT feature of every vocabulary piece, as the server hashes a piece
    (the pad id: zeros). The unknown id gets the feature of "<unk>", where embed-eelbert, reading
    piece strings, hashes the unknown character itself."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=tokenizer_file)
    hasher = PieceHasher(seed, dim, orders)
    rows = [np.zeros(dim, np.float32) if i == sp.pad_id() else hasher(sp.id_to_piece(i))
            for i in range(sp.get_piece_size())]
    return torch.from_numpy(np.stack(rows))


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
        lexical = h[:, :, self.hidden_size:self.hidden_size + self.classes].float()
        pooled = (lexical * m).sum(1) / pieces.pow(self.length_power)
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


def embedder_window(x: Tensor, mask: Tensor, window: int, eos_id: int) -> Tuple[Tensor, Tensor]:
    """The ids and mask an embedder trained on `window` positions reads of each row: the first
    `window`, the last of them replaced by eos when the row goes on past it, which is how that
    embedder's own tokenizer cuts a long text. Depends on the row alone, not on its padding."""
    width = min(x.size(1), window)
    ids, m = x[:, :width], mask[:, :width]
    if x.size(1) > window:
        cut = mask[:, window] > 0
        last = torch.where(cut, torch.full_like(ids[:, width - 1], eos_id), ids[:, width - 1])
        ids = torch.cat([ids[:, :width - 1], last.unsqueeze(1)], dim=1)
    return ids, m


class EmbeddingProbeClassifier(LexicalClassifier):
    """A LexicalClassifier times a third expert that transfers across languages: a linear probe,
    trained on English sections only, on the normalized sentence embedding of a frozen EELBERT
    embedder (embed-eelbert's encoder, trained contrastively on en<->xx pairs):

        logits = log_softmax(encoder) + weight * log_softmax(lexical) + probe_weight * log_softmax(probe)

    The embedder's state rides after the lexical channels, and the field evolves it with its own
    shared block at the same dt (both are trained to depth L). Its input features are EELBERT's
    hashed n-grams of each vocabulary piece, computed once at export (`piece_features`, a buffer:
    derived, not trained), so the model reads token ids like the rest; it reads the window its own
    tokenizer would (embedder_window), and its channels stay zero past it."""

    def __init__(self, encoder: SharedEncoderBase, vocab: int, classes: int, embedder: EelbertEncoder,
                 piece_features: Tensor, eos_id: int, buckets: int = DEFAULT_BUCKETS, weight: float = 1.0,
                 length_power: float = 0.5, probe_weight: float = 1.0, probe_scale: float = 10.0):
        super().__init__(encoder, vocab, classes, buckets, weight, length_power)
        assert embedder.trained_depth == encoder.trained_depth, "the experts share dt = L / n"
        assert piece_features.shape == (vocab, embedder.hash_dim)
        self.embedder = embedder
        self.register_buffer("piece_features", piece_features.float())
        self.window = embedder.max_len
        self.eos_id = eos_id
        self.embedder_offset = self.hidden_size + classes
        self.probe = nn.Linear(embedder.out_dim, classes)
        self.probe_weight = probe_weight
        # the probe reads a unit vector: a fixed scale lets its logits be large without huge weights
        self.probe_scale = probe_scale

    @torch.jit.export
    def prepare(self) -> None:
        self.encoder.prepare()
        self.embedder.prepare()

    def _pad_to(self, state: Tensor, length: int) -> Tensor:
        return F.pad(state, [0, 0, 0, length - state.size(1)]) if state.size(1) < length else state

    @torch.jit.export
    def input_stage(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.encoder.input_stage(x, mask)
        ids, window_mask = embedder_window(x, mask, self.window, self.eos_id)
        embedded = self.embedder.input_stage(F.embedding(ids, self.piece_features), window_mask)
        return torch.cat([h, self.lexical_scores(x, mask).to(h.dtype), self._pad_to(embedded.to(h.dtype), x.size(1))], dim=-1)

    @torch.jit.export
    def vector_field(self, h: Tensor, mask: Tensor) -> Tensor:
        width = min(h.size(1), self.window)
        encoder_field = self.encoder.vector_field(h[:, :, :self.hidden_size], mask)
        embedder_field = self.embedder.vector_field(h[:, :width, self.embedder_offset:], mask[:, :width])
        return torch.cat([encoder_field, encoder_field.new_zeros([h.size(0), h.size(1), self.classes]),
                          self._pad_to(embedder_field, h.size(1))], dim=-1)

    @torch.jit.export
    def probe_logprobs(self, h: Tensor, mask: Tensor) -> Tensor:
        width = min(h.size(1), self.window)
        e = F.normalize(self.embedder.output_stage(h[:, :width, self.embedder_offset:], mask[:, :width]).float(), dim=-1)
        # float: under bfloat16 autocast the logits would round by ~0.03 at the scale of the product weight
        return F.log_softmax(self.probe_scale * self.probe(e).float(), dim=-1)

    @torch.jit.export
    def output_stage(self, h: Tensor, mask: Tensor) -> Tensor:
        deep, lexical = self.experts(h, mask)
        return deep + self.weight * lexical + self.probe_weight * self.probe_logprobs(h, mask)
