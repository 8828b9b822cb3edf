"""Parameter-shared encoder-decoder translator whose encoder and decoder are each one shared
pre-LN block run as an ODE (docs/MODEL_CONTRACT.md, "Translation").

Encoder: tokens -> h0 (tied embedding * sqrt(H) + learned position, LayerNorm); dh/dt = f_enc(h)
with the shared block of families.block_field; memory = LN(h(L)).
Decoder: one shared block with causal self-attention, cross-attention and FFN,
    f_dec(g) = a + c + FFN(LN3(g + a + c)),  a = SelfAttn(LN1(g)),  c = CrossAttn(LN2(g + a)),
so g + f_dec(g) is one pre-LN decoder layer and Euler with dt = L/n runs it n times.

Incremental decoding keeps a self-attention KV cache PER STEP INDEX: at solver step i the
decoder attends to the keys/values that the same step index produced for earlier positions
(exactly what the parallel teacher-forced forward computes). Cross-attention keys/values come
from the fixed memory through shared weights, so they are the same at every step index and are
computed once per request (cross_kv).

Server-facing methods (all torch.jit.export; the encoder's use the encoder contract's names):
  input_stage(ids, mask) -> h0                         [B, S, H]
  vector_field(h, mask) -> f_enc(h)                    [B, S, H]
  output_stage(h, mask) -> memory                      [B, S, H]
  forward(ids, mask) -> memory after L Euler steps (the encoder as trained)
  cross_kv(memory, mask) -> (k, v, bias)              [B, heads, S, H/heads] each, bias [B, 1, 1, S]
  decoder_input(tokens, positions) -> g0               [B, 1, H]   (tokens, positions: [B] int64)
  decoder_field(g, cache_k, cache_v, cross_k, cross_v, cross_bias) -> (f, cache_k', cache_v')
        cache_*: [B, heads, t, H/heads] for this step index (t may be 0), returned with the
        current position appended; every cached position is visible (no self-attention mask)
  decoder_logits(g) -> log-probabilities               [B, V]
"""
import math
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .families import _normal, block_field, mask_bias


class SharedTranslator(nn.Module):
    family: str = "shared-encoder-decoder"

    def __init__(self, vocab: int, hidden: int = 256, heads: int = 4, ffn: int = 1024,
                 encoder_depth: int = 6, decoder_depth: int = 6, max_len: int = 128,
                 pad_id: int = 0, bos_id: int = 2, eos_id: int = 3):
        super().__init__()
        assert hidden % heads == 0
        self.vocab_size = vocab
        self.hidden_size = hidden
        self.num_heads = heads
        self.head_dim = hidden // heads
        self.ffn_size = ffn
        self.encoder_depth = encoder_depth
        self.decoder_depth = decoder_depth
        self.trained_depth = encoder_depth
        self.max_len = max_len
        self.pad_id = pad_id
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.emb_scale = math.sqrt(hidden)
        # docs/MODEL_CONTRACT.md, "Native fields": the encoder's field is families.block_field over
        # the e_* tensors, decoder_field the pre-LN self + cross-attention block over the d_* ones.
        self.native_field = "pre_ln"
        self.native_field_prefix = "e_"
        self.native_decoder = "pre_ln_cross"
        # 0: decoder_logits projects onto the vocabulary in float32. K > 0: it ranks the
        # vocabulary with a bfloat16 copy of the tied embedding (made by prepare(), not stored)
        # and recomputes the K best logits of every row in float32 (set at export).
        self.exact_logit_candidates = 0
        self.register_buffer("projection_bf16", torch.zeros(0, dtype=torch.bfloat16), persistent=False)
        std = 0.02
        self.embedding = nn.Parameter(_normal([vocab, hidden], hidden ** -0.5))
        self.enc_pos = nn.Parameter(_normal([max_len, hidden], std))
        self.dec_pos = nn.Parameter(_normal([max_len, hidden], std))
        self.enc_ln_in_w = nn.Parameter(torch.ones(hidden)); self.enc_ln_in_b = nn.Parameter(torch.zeros(hidden))
        self.dec_ln_in_w = nn.Parameter(torch.ones(hidden)); self.dec_ln_in_b = nn.Parameter(torch.zeros(hidden))
        # encoder shared block
        self.e_ln1_w = nn.Parameter(torch.ones(hidden)); self.e_ln1_b = nn.Parameter(torch.zeros(hidden))
        self.e_ln2_w = nn.Parameter(torch.ones(hidden)); self.e_ln2_b = nn.Parameter(torch.zeros(hidden))
        self.e_w_qkv = nn.Parameter(_normal([3 * hidden, hidden], std)); self.e_b_qkv = nn.Parameter(torch.zeros(3 * hidden))
        self.e_w_o = nn.Parameter(_normal([hidden, hidden], std)); self.e_b_o = nn.Parameter(torch.zeros(hidden))
        self.e_w_1 = nn.Parameter(_normal([ffn, hidden], std)); self.e_b_1 = nn.Parameter(torch.zeros(ffn))
        self.e_w_2 = nn.Parameter(_normal([hidden, ffn], std)); self.e_b_2 = nn.Parameter(torch.zeros(hidden))
        self.e_ln_f_w = nn.Parameter(torch.ones(hidden)); self.e_ln_f_b = nn.Parameter(torch.zeros(hidden))
        # decoder shared block
        self.d_ln1_w = nn.Parameter(torch.ones(hidden)); self.d_ln1_b = nn.Parameter(torch.zeros(hidden))
        self.d_ln2_w = nn.Parameter(torch.ones(hidden)); self.d_ln2_b = nn.Parameter(torch.zeros(hidden))
        self.d_ln3_w = nn.Parameter(torch.ones(hidden)); self.d_ln3_b = nn.Parameter(torch.zeros(hidden))
        self.d_w_qkv = nn.Parameter(_normal([3 * hidden, hidden], std)); self.d_b_qkv = nn.Parameter(torch.zeros(3 * hidden))
        self.d_w_o = nn.Parameter(_normal([hidden, hidden], std)); self.d_b_o = nn.Parameter(torch.zeros(hidden))
        self.d_w_q2 = nn.Parameter(_normal([hidden, hidden], std)); self.d_b_q2 = nn.Parameter(torch.zeros(hidden))
        self.d_w_kv2 = nn.Parameter(_normal([2 * hidden, hidden], std)); self.d_b_kv2 = nn.Parameter(torch.zeros(2 * hidden))
        self.d_w_o2 = nn.Parameter(_normal([hidden, hidden], std)); self.d_b_o2 = nn.Parameter(torch.zeros(hidden))
        self.d_w_1 = nn.Parameter(_normal([ffn, hidden], std)); self.d_b_1 = nn.Parameter(torch.zeros(ffn))
        self.d_w_2 = nn.Parameter(_normal([hidden, ffn], std)); self.d_b_2 = nn.Parameter(torch.zeros(hidden))
        self.d_ln_f_w = nn.Parameter(torch.ones(hidden)); self.d_ln_f_b = nn.Parameter(torch.zeros(hidden))
        self.out_bias = nn.Parameter(torch.zeros(vocab))

    # ---- encoder ---------------------------------------------------------------------------
    @torch.jit.export
    def prepare(self) -> None:
        if self.exact_logit_candidates > 0:
            self.projection_bf16 = self.embedding.detach().to(torch.bfloat16).contiguous()

    @torch.jit.export
    def input_stage(self, ids: Tensor, mask: Tensor) -> Tensor:
        T = ids.size(1)
        e = F.embedding(ids, self.embedding) * self.emb_scale + self.enc_pos[:T].unsqueeze(0)
        h = F.layer_norm(e, [self.hidden_size], self.enc_ln_in_w, self.enc_ln_in_b, 1e-5)
        return h * mask.unsqueeze(-1)

    @torch.jit.export
    def vector_field(self, h: Tensor, mask: Tensor) -> Tensor:
        return block_field(h, mask_bias(mask), self.num_heads, self.scale, self.e_ln1_w, self.e_ln1_b,
                           self.e_w_qkv, self.e_b_qkv, self.e_w_o, self.e_b_o, self.e_ln2_w, self.e_ln2_b,
                           self.e_w_1, self.e_b_1, self.e_w_2, self.e_b_2)

    @torch.jit.export
    def output_stage(self, h: Tensor, mask: Tensor) -> Tensor:
        return F.layer_norm(h, [self.hidden_size], self.e_ln_f_w, self.e_ln_f_b, 1e-5) * mask.unsqueeze(-1)

    # ---- decoder ---------------------------------------------------------------------------
    def _heads(self, x: Tensor) -> Tensor:
        """[B, T, H] -> [B, heads, T, dh]"""
        return x.view(x.size(0), x.size(1), self.num_heads, self.head_dim).transpose(1, 2)

    def _merge(self, x: Tensor) -> Tensor:
        """[B, heads, T, dh] -> [B, T, H]"""
        return x.transpose(1, 2).reshape(x.size(0), x.size(2), self.hidden_size)

    @torch.jit.export
    def cross_kv(self, memory: Tensor, mask: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Cross-attention keys, values and additive padding bias: the same at every decoder
        step index and position, so computed once per request."""
        kv = F.linear(memory, self.d_w_kv2, self.d_b_kv2)
        k, v = kv.chunk(2, dim=-1)
        return self._heads(k).contiguous(), self._heads(v).contiguous(), mask_bias(mask)

    @torch.jit.export
    def decoder_input(self, tokens: Tensor, positions: Tensor) -> Tensor:
        e = F.embedding(tokens, self.embedding) * self.emb_scale + F.embedding(positions, self.dec_pos)
        return F.layer_norm(e, [self.hidden_size], self.dec_ln_in_w, self.dec_ln_in_b, 1e-5).unsqueeze(1)

    def _decoder_branch(self, g: Tensor, k: Tensor, v: Tensor, q: Tensor, self_bias: Optional[Tensor],
                        cross_k: Tensor, cross_v: Tensor, cross_bias: Tensor) -> Tensor:
        H = self.hidden_size
        if self_bias is None:
            s = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        else:
            s = torch.add(self_bias, torch.matmul(q, k.transpose(-1, -2)), alpha=self.scale)
        a = F.linear(self._merge(torch.matmul(torch.softmax(s, dim=-1), v)), self.d_w_o, self.d_b_o)
        y = F.layer_norm(g + a, [H], self.d_ln2_w, self.d_ln2_b, 1e-5)
        q2 = self._heads(F.linear(y, self.d_w_q2, self.d_b_q2))
        s2 = torch.add(cross_bias, torch.matmul(q2, cross_k.transpose(-1, -2)), alpha=self.scale)
        c = F.linear(self._merge(torch.matmul(torch.softmax(s2, dim=-1), cross_v)), self.d_w_o2, self.d_b_o2)
        z = F.layer_norm(g + a + c, [H], self.d_ln3_w, self.d_ln3_b, 1e-5)
        m = F.linear(F.gelu(F.linear(z, self.d_w_1, self.d_b_1)), self.d_w_2, self.d_b_2)
        return a + c + m

    def _qkv(self, g: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        x = F.layer_norm(g, [self.hidden_size], self.d_ln1_w, self.d_ln1_b, 1e-5)
        q, k, v = F.linear(x, self.d_w_qkv, self.d_b_qkv).chunk(3, dim=-1)
        return self._heads(q), self._heads(k), self._heads(v)

    @torch.jit.export
    def decoder_field(self, g: Tensor, cache_k: Tensor, cache_v: Tensor, cross_k: Tensor,
                      cross_v: Tensor, cross_bias: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """One position (g: [B, 1, H]) at one step index; cache_*: this step index's keys and
        values of the earlier positions. Returns the field and the caches with this position
        appended."""
        q, k, v = self._qkv(g)
        k = torch.cat([cache_k, k], dim=2)
        v = torch.cat([cache_v, v], dim=2)
        f = self._decoder_branch(g, k, v, q, None, cross_k, cross_v, cross_bias)
        return f, k, v

    @torch.jit.export
    def decoder_field_parallel(self, g: Tensor, causal_bias: Tensor, cross_k: Tensor,
                               cross_v: Tensor, cross_bias: Tensor) -> Tensor:
        """Teacher-forced field over all target positions (training), same math."""
        q, k, v = self._qkv(g)
        return self._decoder_branch(g, k, v, q, causal_bias, cross_k, cross_v, cross_bias)

    @torch.jit.export
    def decoder_logits(self, g: Tensor) -> Tensor:
        x = F.layer_norm(g.squeeze(1), [self.hidden_size], self.d_ln_f_w, self.d_ln_f_b, 1e-5)
        if self.exact_logit_candidates > 0 and self.projection_bf16.numel() > 0:
            return torch.log_softmax(self._shortlist_logits(x), dim=-1)
        # The tied [vocab, H] projection is the largest matrix read per position. As E x^T
        # (matrix-vector for one hypothesis) OpenBLAS runs it faster than linear(x, E) for the
        # few rows a decoding step has: 0.76 vs 1.79 ms at 1 row, 1.69 vs 2.58 ms at 16
        # (8000 x 256, one thread, this machine while training ran).
        if x.size(0) == 1:
            logits = torch.mv(self.embedding, x[0]).unsqueeze(0)
        else:
            logits = torch.mm(self.embedding, x.t()).t()
        return torch.log_softmax(logits + self.out_bias, dim=-1)

    def _shortlist_logits(self, x: Tensor) -> Tensor:
        """bfloat16 logits for all tokens (4-5x faster than float32 on CPUs with AVX-512 BF16),
        then the K best of each row recomputed in float32: the tokens a search can pick carry
        exact scores, and only the softmax normalizer sees the rounded tail."""
        approx = F.linear(x.to(torch.bfloat16), self.projection_bf16).float() + self.out_bias
        k = min(self.exact_logit_candidates, self.vocab_size)
        top = torch.topk(approx, k, dim=-1).indices
        # [B, K, H] * [B, 1, H] summed: faster than bmm for these tiny matrix-vector products
        exact = (F.embedding(top, self.embedding) * x.unsqueeze(1)).sum(-1) + self.out_bias[top]
        return approx.scatter(1, top, exact)

    def forward(self, ids: Tensor, mask: Tensor) -> Tensor:
        return self.encode(ids, mask, self.encoder_depth)

    # ---- training / reference forward -------------------------------------------------------
    def encode(self, ids: Tensor, mask: Tensor, steps: int) -> Tensor:
        dt = float(self.encoder_depth) / float(steps)
        h = self.input_stage(ids, mask)
        for _ in range(steps):
            h = h + dt * self.vector_field(h, mask)
        return self.output_stage(h, mask)

    def decode_logits(self, memory: Tensor, memory_mask: Tensor, tgt_in: Tensor, steps: int) -> Tensor:
        """Teacher forcing: tgt_in [B, T] (BOS + target[:-1]) -> pre-softmax logits [B, T, V]."""
        T = tgt_in.size(1)
        dt = float(self.decoder_depth) / float(steps)
        e = F.embedding(tgt_in, self.embedding) * self.emb_scale + self.dec_pos[:T].unsqueeze(0)
        g = F.layer_norm(e, [self.hidden_size], self.dec_ln_in_w, self.dec_ln_in_b, 1e-5)
        causal = torch.full((T, T), -1e9, dtype=g.dtype, device=g.device).triu(1).view(1, 1, T, T)
        ck, cv, cross_bias = self.cross_kv(memory, memory_mask)
        for _ in range(steps):
            g = g + dt * self.decoder_field_parallel(g, causal, ck, cv, cross_bias)
        x = F.layer_norm(g, [self.hidden_size], self.d_ln_f_w, self.d_ln_f_b, 1e-5)
        return F.linear(x, self.embedding, self.out_bias)


DEAD_BEAM = -1e9


def default_max_output_tokens(input_tokens: int, limit: int) -> int:
    """The server's rule (scheduler::DefaultMaxOutputTokens); input_tokens counts BOS/EOS."""
    return max(2, min(limit, 2 * input_tokens + 8))


def encode_memory(model: SharedTranslator, ids: Tensor, mask: Tensor, enc_steps: int) -> Tensor:
    """The encoder as the server runs it: the exported stages called one by one (not
    model.encode, the same loop inside TorchScript), so that comparing the two checks the stages."""
    h = model.input_stage(ids, mask)
    dt = float(model.encoder_depth) / enc_steps
    for _ in range(enc_steps):
        h = h + dt * model.vector_field(h, mask)
    return model.output_stage(h, mask)


def beam_search(model: SharedTranslator, ids: Tensor, mask: Tensor, enc_steps: int, dec_steps: int,
                beam: int, max_out: List[int], min_out: int = 1,
                length_penalty: float = 1.0) -> List[Tuple[List[int], float]]:
    """The server's search (server/runtime/translation_executor.cc), in Python, for parity tests
    and offline evaluation: per row (tokens without BOS/EOS, log-prob / generated_tokens ** alpha,
    alpha = length_penalty, EOS counted). max_out[b] == 0 takes the server's default from the
    row's length; EOS is no candidate before min_out tokens."""
    memory = encode_memory(model, ids, mask, enc_steps)
    B = ids.size(0)
    ck, cv, cbias = model.cross_kv(memory, mask)
    expand = torch.arange(B).repeat_interleave(beam)
    ck, cv, cbias = ck.index_select(0, expand), cv.index_select(0, expand), cbias.index_select(0, expand)
    live = []
    for b in range(B):
        limit = max_out[b] or default_max_output_tokens(int(mask[b].sum()), model.max_len)
        limit = max(1, min(limit, model.max_len))
        live.append(dict(row=b, max_out=limit, min_out=min(min_out, limit), beams=[[] for _ in range(beam)],
                         scores=[0.0] + [DEAD_BEAM] * (beam - 1), finished=[]))
    empty = torch.zeros(B * beam, model.num_heads, 0, model.head_dim)
    caches = [(empty, empty) for _ in range(dec_steps)]
    next_tokens = [model.bos_id] * (B * beam)
    dt = float(model.decoder_depth) / dec_steps
    results: List[Tuple[List[int], float]] = [([], 0.0)] * B
    position = 0
    while live:
        n = len(live) * beam
        g = model.decoder_input(torch.tensor(next_tokens), torch.full((n,), position, dtype=torch.long))
        for i in range(dec_steps):
            f, k, v = model.decoder_field(g, caches[i][0], caches[i][1], ck, cv, cbias)
            caches[i] = (k, v)
            g = g + dt * f
        logp = model.decoder_logits(g).float()
        V = logp.size(1)
        scores = torch.tensor([s for r in live for s in r["scores"]], dtype=torch.float32)
        totals = (logp + scores.unsqueeze(1)).view(len(live), beam * V)
        top_s, top_i = totals.topk(min(2 * beam, beam * V), dim=1)
        still, parents, next_tokens = [], [], []
        for r_i, r in enumerate(live):
            last = position + 1 >= r["max_out"]
            beams, bscores, rparents = [], [], []
            for c in range(top_s.size(1)):
                if len(beams) >= beam:
                    break
                parent, token, score = int(top_i[r_i, c]) // V, int(top_i[r_i, c]) % V, float(top_s[r_i, c])
                if score <= DEAD_BEAM / 2:
                    break
                so_far = list(r["beams"][parent])
                if token == model.eos_id:
                    if position < r["min_out"]:
                        continue
                    if c < beam:
                        r["finished"].append((so_far, score / (position + 1) ** length_penalty))
                    continue
                so_far.append(token)
                if last:
                    r["finished"].append((so_far, score / (position + 1) ** length_penalty))
                    continue
                beams.append(so_far); bscores.append(score); rparents.append(r_i * beam + parent)
            if last or len(r["finished"]) >= beam or not beams:
                if not r["finished"]:
                    r["finished"].append((r["beams"][0], r["scores"][0] / (position + 1) ** length_penalty))
                results[r["row"]] = max(r["finished"], key=lambda x: x[1])
                continue
            while len(beams) < beam:
                beams.append(beams[0]); bscores.append(DEAD_BEAM); rparents.append(rparents[0])
            r["beams"], r["scores"] = beams, bscores
            next_tokens.extend(b[-1] for b in beams)
            parents.extend(rparents)
            still.append(r)
        live = still
        position += 1
        if live:
            index = torch.tensor(parents)
            caches = [(k.index_select(0, index), v.index_select(0, index)) for k, v in caches]
            ck, cv, cbias = ck.index_select(0, index), cv.index_select(0, index), cbias.index_select(0, index)
    return results


def exported_weights(scripted: torch.jit.ScriptModule, model: "SharedTranslator") -> Dict[str, Tensor]:
    """The parameters of an exported (TorchScript) translator that `model` has, for
    load_state_dict: buffers prepare() makes at load, such as the bfloat16 projection, are not
    weights and are dropped."""
    keys = set(model.state_dict())
    return {k: v for k, v in scripted.state_dict().items() if k in keys}
