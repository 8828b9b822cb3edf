"""Checks every exported model folder the way the server will use it (Python side):
forward(x, mask) == input_stage -> L Euler steps (dt = 1) -> output_stage, pads ignored,
prepare() idempotent, config/quality text protos parse."""
import os
import re
from typing import List

import torch

from .hashing import PieceHasher
from .solvers import run
from .text import Tokenizer


def read_config(path: str) -> dict:
    txt = open(path, encoding="utf-8").read()
    def one(key, cast=str, default=None):
        m = re.search(r"^\s*%s:\s*\"?([^\"\n]*)\"?" % key, txt, re.M)
        return cast(m.group(1)) if m else default
    cfg = dict(name=one("name"), task=one("task"), family=one("family"), trained_depth=one("trained_depth", int),
               max_len=one("max_sequence_length", int), input_kind=one("input_kind"),
               labels=re.findall(r'^labels:\s*"([^"]*)"', txt, re.M))
    if cfg["input_kind"] == "HASHED_NGRAMS":
        cfg["hash"] = dict(dim=one("dim", int), seed=one("seed", int),
                           orders=[int(o) for o in re.findall(r"ngram_orders:\s*(\d+)", txt)])
    return cfg


def load_model_dir(d: str):
    cfg = read_config(os.path.join(d, "config.pbtxt"))
    hasher = None
    if cfg["input_kind"] == "HASHED_NGRAMS":
        h = cfg["hash"]
        hasher = PieceHasher(h["seed"], h["dim"], h["orders"])
    tok = Tokenizer(os.path.join(d, "tokenizer.model"), cfg["max_len"], hasher=hasher)
    m = torch.jit.load(os.path.join(d, "model.pt"), map_location="cpu")
    m.eval()
    m.prepare()
    return cfg, tok, m


@torch.no_grad()
def verify_model_dir(d: str, texts: List[str], tol: float = 1e-5, proto_root: str = "") -> List[str]:
    cfg, tok, m = load_model_dir(d)
    if cfg["task"] == "TRANSLATION":
        return verify_translator(d, cfg, tok, m, texts, tol, proto_root)
    msgs = []
    assert int(m.trained_depth) == cfg["trained_depth"], "trained_depth attribute != config"
    x, mask = tok.batch(texts)
    ref = m.forward(x, mask)
    tol = tol * max(1.0, ref.abs().max().item())  # relative for large outputs (logits)
    stages = run(m, x, mask, cfg["trained_depth"], "EULER")
    err = (ref - stages).abs().max().item()
    assert err <= tol, "%s: forward vs stages max abs diff %g" % (d, err)
    msgs.append("forward==stages (max diff %.2g)" % err)
    m.prepare()  # idempotent
    err2 = (m.forward(x, mask) - ref).abs().max().item()
    assert err2 <= tol, "prepare() not idempotent"
    # padding invariance: same rows with 7 extra pad positions holding garbage ids/features
    short = [t[:40] for t in texts]
    ref_s = m.forward(*tok.batch(short))
    x2, mask2 = tok.batch(short, pad_to=cfg["max_len"])
    if x2.dtype == torch.int64:
        x2[mask2 == 0] = 5
    else:
        x2[mask2 == 0] = 0.37
    err3 = (m.forward(x2, mask2) - ref_s).abs().max().item()
    assert err3 <= tol, "%s: output changes with padding (%g)" % (d, err3)
    # row independence: each row alone == row in batch
    err4 = max((m.forward(*tok.batch([t])) - ref[i:i + 1]).abs().max().item() for i, t in enumerate(texts[:4]))
    assert err4 <= tol, "%s: row depends on batch (%g)" % (d, err4)
    msgs.append("padding-invariant (%.2g, %.2g)" % (err3, err4))
    if proto_root:
        from .export import validate_text_protos
        msgs.append("protos parse" if validate_text_protos(d, proto_root) else "protos not checked (no protobuf)")
    return msgs


@torch.no_grad()
def verify_translator(d, cfg, tok, m, texts, tol, proto_root) -> List[str]:
    """Encoder: forward == stages, pads ignored. Decoder: the incremental path the server runs
    (decoder_field with a KV cache per step index) equals the teacher-forced parallel
    computation the model was trained with, at several step counts."""
    from .translation import encode_memory
    msgs = []
    # The decoder comparisons below use the float32 projection (bfloat16 rounding of the tail
    # could flip between two paths that differ by 1e-6); the served shortlist is checked last.
    shortlist = m.projection_bf16
    m.projection_bf16 = torch.zeros(0, dtype=torch.bfloat16)
    x, mask = tok.batch(texts)
    ref = m.forward(x, mask)
    err = (ref - encode_memory(m, x, mask, cfg["trained_depth"])).abs().max().item()
    assert err <= tol, "%s: forward vs stages max abs diff %g" % (d, err)
    x2, mask2 = tok.batch(texts, pad_to=cfg["max_len"])
    x2[mask2 == 0] = 5
    T = x.size(1)
    err3 = (m.forward(x2, mask2)[:, :T] - ref).abs().max().item()
    assert err3 <= tol, "%s: encoder output changes with padding (%g)" % (d, err3)
    msgs.append("forward==stages (%.2g), padding-invariant (%.2g)" % (err, err3))
    worst = 0.0
    for n in (1, 2, int(m.decoder_depth)):
        memory = encode_memory(m, x, mask, n)
        ck, cv, cbias = m.cross_kv(memory, mask)
        tgt = torch.randint(4, 50, (x.size(0), 6))
        tgt[:, 0] = int(m.bos_id)
        B, Tt = tgt.shape
        dt = float(m.decoder_depth) / n
        g = m.decoder_input(tgt.reshape(-1), torch.arange(Tt).repeat(B)).view(B, Tt, -1)
        causal = torch.full((Tt, Tt), -1e9).triu(1).view(1, 1, Tt, Tt)
        for _ in range(n):
            g = g + dt * m.decoder_field_parallel(g, causal, ck, cv, cbias)
        parallel = torch.stack([m.decoder_logits(g[:, t:t + 1]) for t in range(Tt)], 1)
        empty = torch.zeros(B, int(m.num_heads), 0, int(m.head_dim))
        caches = [(empty, empty)] * n
        for t in range(Tt):
            gi = m.decoder_input(tgt[:, t], torch.full((B,), t, dtype=torch.long))
            for i in range(n):
                f, k, v = m.decoder_field(gi, caches[i][0], caches[i][1], ck, cv, cbias)
                caches[i] = (k, v)
                gi = gi + dt * f
            worst = max(worst, (m.decoder_logits(gi) - parallel[:, t]).abs().max().item())
    assert worst <= 1e-4, "%s: incremental decoding differs from teacher forcing (%g)" % (d, worst)
    msgs.append("incremental==parallel decoder (%.2g)" % worst)
    if int(m.exact_logit_candidates) > 0 and shortlist.numel() > 0:  # served projection vs float32
        exact = m.decoder_logits(gi)
        m.projection_bf16 = shortlist
        fast = m.decoder_logits(gi)
        k = max(1, int(m.exact_logit_candidates) // 2)
        top = exact.topk(k, -1)
        assert torch.equal(fast.topk(k, -1).indices, top.indices), "%s: shortlist changes the best %d tokens" % (d, k)
        gap = (fast.gather(1, top.indices) - top.values).abs().max().item()
        assert gap <= 1e-2, "%s: shortlist log-probabilities off by %g" % (d, gap)
        msgs.append("bf16 shortlist: best %d tokens equal float32 ranking (%.2g)" % (k, gap))
    if proto_root:
        from .export import validate_text_protos
        msgs.append("protos parse" if validate_text_protos(d, proto_root) else "protos not checked (no protobuf)")
    return msgs
