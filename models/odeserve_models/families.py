"""Parameter-shared transformer encoders whose shared block is an ODE field.

One codebase, three families (see models/README.md and /work/shared/research/papers.md):
- AlbertEncoder:    factorized token embedding table (V x E -> H) + one shared pre-LN block.
- ShareBertEncoder: stored embeddings E (V x F); virtual matrix M = E W + b (V x C); the shared
                    block's Q/K/V/O/FFN matrices are column slices of M, materialized ONCE in
                    prepare() as buffers (never per forward). Biases and LayerNorms are shared
                    too (the block is one autonomous ODE field).
- EelbertEncoder:   no embedding table: the caller passes hashed n-gram features [B, T, dim]
                    (odeserve_models.hashing); a small trained MLP projects dim -> H.

All are pre-LN, so h + f(h) is exactly one transformer layer with
    f(h) = a + FFN(LN2(h + a)),  a = Attn(LN1(h)).
Optional unshared prefix/suffix layers ("partially shared"). Everything is torch.jit.script-able
and follows docs/MODEL_CONTRACT.md: input_stage, vector_field, output_stage, prepare, forward,
attribute trained_depth, and attribute native_field = "pre_ln": the server may evaluate this
exact block (block_field's tensors, read by name) natively instead of through the interpreter.
"""
import math
from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


# ShareBERT's block matrices: buffers materialized by prepare() (or per batch in training), not
# weights; a stored model holds them empty.
PREPARED_MATRICES = ("w_qkv", "w_o", "w_1", "w_2")


def mask_bias(mask: Tensor) -> Tensor:
    """[B, T] float mask (1 token, 0 pad) -> additive attention bias [B, 1, 1, T]."""
    return ((mask - 1.0) * 1e9).unsqueeze(1).unsqueeze(2)


def block_field(h: Tensor, bias: Tensor, num_heads: int, scale: float,
                ln1_w: Tensor, ln1_b: Tensor, w_qkv: Tensor, b_qkv: Tensor,
                w_o: Tensor, b_o: Tensor, ln2_w: Tensor, ln2_b: Tensor,
                w_1: Tensor, b_1: Tensor, w_2: Tensor, b_2: Tensor) -> Tensor:
    """Residual branch of one pre-LN transformer layer: layer(h) = h + block_field(h)."""
    B, T, H = h.size(0), h.size(1), h.size(2)
    dh = H // num_heads
    x = F.layer_norm(h, [H], ln1_w, ln1_b, 1e-5)
    qkv = F.linear(x, w_qkv, b_qkv).view(B, T, 3, num_heads, dh).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    scores = torch.add(bias, torch.matmul(q, k.transpose(-1, -2)), alpha=scale)
    ctx = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(B, T, H)
    a = F.linear(ctx, w_o, b_o)
    y = F.layer_norm(h + a, [H], ln2_w, ln2_b, 1e-5)
    m = F.linear(F.gelu(F.linear(y, w_1, b_1)), w_2, b_2)
    return a + m


def _normal(shape: List[int], std: float) -> Tensor:
    return torch.randn(shape) * std


class Layer(nn.Module):
    """An unshared pre-LN layer (prefix/suffix of a partially shared model)."""

    def __init__(self, hidden: int, heads: int, ffn: int, std: float = 0.02):
        super().__init__()
        self.num_heads = heads
        self.scale = 1.0 / math.sqrt(hidden // heads)
        self.ln1_w = nn.Parameter(torch.ones(hidden)); self.ln1_b = nn.Parameter(torch.zeros(hidden))
        self.ln2_w = nn.Parameter(torch.ones(hidden)); self.ln2_b = nn.Parameter(torch.zeros(hidden))
        self.w_qkv = nn.Parameter(_normal([3 * hidden, hidden], std)); self.b_qkv = nn.Parameter(torch.zeros(3 * hidden))
        self.w_o = nn.Parameter(_normal([hidden, hidden], std)); self.b_o = nn.Parameter(torch.zeros(hidden))
        self.w_1 = nn.Parameter(_normal([ffn, hidden], std)); self.b_1 = nn.Parameter(torch.zeros(ffn))
        self.w_2 = nn.Parameter(_normal([hidden, ffn], std)); self.b_2 = nn.Parameter(torch.zeros(hidden))

    def forward(self, h: Tensor, bias: Tensor) -> Tensor:
        return h + block_field(h, bias, self.num_heads, self.scale, self.ln1_w, self.ln1_b,
                               self.w_qkv, self.b_qkv, self.w_o, self.b_o, self.ln2_w, self.ln2_b,
                               self.w_1, self.b_1, self.w_2, self.b_2)


class SharedEncoderBase(nn.Module):
    """Common stages. Subclasses provide _embed(x) -> [B, T, H] and the field matrices
    w_qkv, w_o, w_1, w_2 (parameters, or buffers materialized by prepare())."""

    def __init__(self, hidden: int, heads: int, ffn: int, trained_depth: int, max_len: int,
                 out_dim: int, prefix_layers: int = 0, suffix_layers: int = 0):
        super().__init__()
        assert hidden % heads == 0
        self.hidden_size = hidden
        self.num_heads = heads
        self.ffn_size = ffn
        self.trained_depth = trained_depth
        self.max_len = max_len
        self.out_dim = out_dim
        self.scale = 1.0 / math.sqrt(hidden // heads)
        # docs/MODEL_CONTRACT.md, "Native fields": vector_field is block_field over the tensors
        # ln1_w ... b_2 with num_heads and scale. A subclass that changes vector_field must reset it.
        self.native_field = "pre_ln"
        self.pos = nn.Parameter(_normal([max_len, hidden], 0.02))
        self.ln_emb_w = nn.Parameter(torch.ones(hidden)); self.ln_emb_b = nn.Parameter(torch.zeros(hidden))
        self.prefix = nn.ModuleList([Layer(hidden, heads, ffn) for _ in range(prefix_layers)])
        self.suffix = nn.ModuleList([Layer(hidden, heads, ffn) for _ in range(suffix_layers)])
        # shared field: LayerNorms and biases (the matrices come from the subclass)
        self.ln1_w = nn.Parameter(torch.ones(hidden)); self.ln1_b = nn.Parameter(torch.zeros(hidden))
        self.ln2_w = nn.Parameter(torch.ones(hidden)); self.ln2_b = nn.Parameter(torch.zeros(hidden))
        self.b_qkv = nn.Parameter(torch.zeros(3 * hidden)); self.b_o = nn.Parameter(torch.zeros(hidden))
        self.b_1 = nn.Parameter(torch.zeros(ffn)); self.b_2 = nn.Parameter(torch.zeros(hidden))
        self.ln_f_w = nn.Parameter(torch.ones(hidden)); self.ln_f_b = nn.Parameter(torch.zeros(hidden))
        self.head = nn.Linear(hidden, out_dim)

    # ---- hooks overridden by families -------------------------------------------------------
    def _embed(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def _ensure_prepared(self) -> None:
        pass

    @torch.jit.export
    def prepare(self) -> None:
        pass

    # ---- contract methods ---------------------------------------------------------------------
    @torch.jit.export
    def input_stage(self, x: Tensor, mask: Tensor) -> Tensor:
        self._ensure_prepared()
        e = self._embed(x)
        T = e.size(1)
        h = F.layer_norm(e + self.pos[:T].unsqueeze(0), [self.hidden_size], self.ln_emb_w, self.ln_emb_b, 1e-5)
        if len(self.prefix) > 0:
            bias = mask_bias(mask)
            for layer in self.prefix:
                h = layer(h, bias)
        return h * mask.unsqueeze(-1)

    @torch.jit.export
    def vector_field(self, h: Tensor, mask: Tensor) -> Tensor:
        return block_field(h, mask_bias(mask), self.num_heads, self.scale, self.ln1_w, self.ln1_b,
                           self.w_qkv, self.b_qkv, self.w_o, self.b_o, self.ln2_w, self.ln2_b,
                           self.w_1, self.b_1, self.w_2, self.b_2)

    @torch.jit.export
    def pool(self, h: Tensor, mask: Tensor) -> Tensor:
        """Suffix layers, final LayerNorm, masked mean pooling -> [B, H]."""
        if len(self.suffix) > 0:
            bias = mask_bias(mask)
            for layer in self.suffix:
                h = layer(h, bias)
        h = F.layer_norm(h, [self.hidden_size], self.ln_f_w, self.ln_f_b, 1e-5)
        m = mask.unsqueeze(-1)
        return (h * m).sum(1) / m.sum(1).clamp(min=1.0)

    @torch.jit.export
    def output_stage(self, h: Tensor, mask: Tensor) -> Tensor:
        return self.head(self.pool(h, mask))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.input_stage(x, mask)
        for _ in range(self.trained_depth):
            h = h + self.vector_field(h, mask)
        return self.output_stage(h, mask)


class AlbertEncoder(SharedEncoderBase):
    family = "albert"

    def __init__(self, vocab: int, emb: int, hidden: int, heads: int, ffn: int, trained_depth: int,
                 max_len: int, out_dim: int, prefix_layers: int = 0, suffix_layers: int = 0):
        super().__init__(hidden, heads, ffn, trained_depth, max_len, out_dim, prefix_layers, suffix_layers)
        self.tok = nn.Parameter(_normal([vocab, emb], 0.02))
        self.emb_proj = nn.Linear(emb, hidden)
        std = 0.02
        self.w_qkv = nn.Parameter(_normal([3 * hidden, hidden], std))
        self.w_o = nn.Parameter(_normal([hidden, hidden], std))
        self.w_1 = nn.Parameter(_normal([ffn, hidden], std))
        self.w_2 = nn.Parameter(_normal([hidden, ffn], std))

    def _embed(self, x: Tensor) -> Tensor:
        return self.emb_proj(F.embedding(x, self.tok))


class EelbertEncoder(SharedEncoderBase):
    family = "eelbert"

    def __init__(self, hash_dim: int, hidden: int, heads: int, ffn: int, trained_depth: int,
                 max_len: int, out_dim: int, prefix_layers: int = 0, suffix_layers: int = 0):
        super().__init__(hidden, heads, ffn, trained_depth, max_len, out_dim, prefix_layers, suffix_layers)
        self.hash_dim = hash_dim
        self.in1 = nn.Linear(hash_dim, hidden)
        self.in2 = nn.Linear(hidden, hidden)
        std = 0.02
        self.w_qkv = nn.Parameter(_normal([3 * hidden, hidden], std))
        self.w_o = nn.Parameter(_normal([hidden, hidden], std))
        self.w_1 = nn.Parameter(_normal([ffn, hidden], std))
        self.w_2 = nn.Parameter(_normal([hidden, ffn], std))

    def _embed(self, x: Tensor) -> Tensor:
        # hash features are means of values in [-1, 1]: scale up before the MLP
        return self.in2(F.gelu(self.in1(x * 4.0)))


def sharebert_slices(hidden: int, ffn: int, vocab: int) -> List[Tuple[str, int, int, int, int]]:
    """(name, rows, cols, first column of M, number of columns) for each sliced matrix."""
    out: List[Tuple[str, int, int, int, int]] = []
    start = 0
    for name, r, c in (("w_qkv", 3 * hidden, hidden), ("w_o", hidden, hidden),
                       ("w_1", ffn, hidden), ("w_2", hidden, ffn)):
        k = (r * c + vocab - 1) // vocab
        out.append((name, r, c, start, k))
        start += k
    return out


class ShareBertEncoder(SharedEncoderBase):
    family = "sharebert"

    def __init__(self, vocab: int, emb: int, hidden: int, heads: int, ffn: int, trained_depth: int,
                 max_len: int, out_dim: int, prefix_layers: int = 0, suffix_layers: int = 0):
        super().__init__(hidden, heads, ffn, trained_depth, max_len, out_dim, prefix_layers, suffix_layers)
        self.vocab = vocab
        sl = sharebert_slices(hidden, ffn, vocab)
        self.cols = sl[-1][3] + sl[-1][4]
        e_std = 0.5
        self.E = nn.Parameter(_normal([vocab, emb], e_std))       # stored embeddings (V x F)
        self.W = nn.Parameter(_normal([emb, self.cols], 0.02 / (math.sqrt(emb) * e_std)))
        self.Wb = nn.Parameter(torch.zeros(self.cols))
        self.emb_proj = nn.Linear(emb, hidden)                     # input embedding F -> H
        # slice geometry as plain ints (TorchScript-friendly)
        self.qkv_r, self.qkv_c, self.qkv_s, self.qkv_k = sl[0][1], sl[0][2], sl[0][3], sl[0][4]
        self.o_r, self.o_c, self.o_s, self.o_k = sl[1][1], sl[1][2], sl[1][3], sl[1][4]
        self.f1_r, self.f1_c, self.f1_s, self.f1_k = sl[2][1], sl[2][2], sl[2][3], sl[2][4]
        self.f2_r, self.f2_c, self.f2_s, self.f2_k = sl[3][1], sl[3][2], sl[3][3], sl[3][4]
        # runtime matrices: empty until prepare() (not stored in model.pt)
        self.register_buffer("w_qkv", torch.zeros(0))
        self.register_buffer("w_o", torch.zeros(0))
        self.register_buffer("w_1", torch.zeros(0))
        self.register_buffer("w_2", torch.zeros(0))

    def _embed(self, x: Tensor) -> Tensor:
        return self.emb_proj(F.embedding(x, self.E))

    def _slice(self, M: Tensor, r: int, c: int, s: int, k: int) -> Tensor:
        # columns s..s+k of M, read column by column, first r*c values as an r x c matrix
        return M[:, s:s + k].t().reshape(-1)[: r * c].reshape(r, c)

    def materialize(self) -> List[Tensor]:
        M = torch.addmm(self.Wb, self.E, self.W)
        return [self._slice(M, self.qkv_r, self.qkv_c, self.qkv_s, self.qkv_k),
                self._slice(M, self.o_r, self.o_c, self.o_s, self.o_k),
                self._slice(M, self.f1_r, self.f1_c, self.f1_s, self.f1_k),
                self._slice(M, self.f2_r, self.f2_c, self.f2_s, self.f2_k)]

    @torch.jit.export
    def prepare(self) -> None:
        w = self.materialize()
        self.w_qkv = w[0].detach().contiguous()
        self.w_o = w[1].detach().contiguous()
        self.w_1 = w[2].detach().contiguous()
        self.w_2 = w[3].detach().contiguous()

    def _ensure_prepared(self) -> None:
        if self.w_qkv.numel() == 0 or self.w_qkv.device != self.E.device:
            self.prepare()

    @torch.jit.ignore
    def train_prepare(self) -> None:
        """Training: materialize with gradients, once per batch (not per field evaluation)."""
        w = self.materialize()
        self.w_qkv, self.w_o, self.w_1, self.w_2 = w[0], w[1], w[2], w[3]

    @torch.jit.ignore
    def clear_prepared(self) -> None:
        for n in PREPARED_MATRICES:
            setattr(self, n, torch.zeros(0))


def build(family: str, **kw) -> SharedEncoderBase:
    return {"albert": AlbertEncoder, "sharebert": ShareBertEncoder, "eelbert": EelbertEncoder}[family](**kw)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
