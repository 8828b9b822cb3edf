"""A reference ALBERT forward pass in plain PyTorch, written from the published architecture
(Lan et al. 2019, "ALBERT: A Lite BERT"; Hugging Face transformers' AlbertModel /
AlbertForSequenceClassification) and independent of odeserve_models.albert: it reads the raw
Hugging Face state dict and config.json dict, and computes in float64 by default.

    out = albert_reference(state_dict, config, input_ids, attention_mask, n_steps=None)
    out["hidden"], out["mean"], out["cls"], out["pooler"], out["logits"]

n_steps=None (or L) is the plain model: the shared layer applied L times. n_steps=n < L is the
ODE reading of the same model: n explicit Euler steps of size L/n,
h <- h + (L/n) * (layer(h) - h).
"""
import math
from typing import Dict, Optional

import torch


def _strip(state_dict: Dict[str, torch.Tensor], dtype) -> Dict[str, torch.Tensor]:
    out = {}
    for k, v in state_dict.items():
        if k.startswith("albert."):
            k = k[len("albert."):]
        if v.is_floating_point():
            out[k] = v.detach().to(dtype)
    return out


def _activation(name: str):
    if name in ("gelu_new", "gelu_fast", "gelu_pytorch_tanh"):
        c = math.sqrt(2.0 / math.pi)
        return lambda x: 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * torch.pow(x, 3.0))))
    if name == "gelu":
        return lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if name == "relu":
        return lambda x: torch.clamp(x, min=0.0)
    raise ValueError(name)


def _layer_norm(x, weight, bias, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight + bias


def _dense(x, sd, name):
    return torch.einsum("...i,oi->...o", x, sd[name + ".weight"]) + sd[name + ".bias"]


def albert_reference(state_dict: Dict[str, torch.Tensor], config: dict, input_ids: torch.Tensor,
                     attention_mask: torch.Tensor, n_steps: Optional[int] = None,
                     dtype: torch.dtype = torch.float64) -> Dict[str, torch.Tensor]:
    sd = _strip(state_dict, dtype)
    eps = float(config.get("layer_norm_eps", 1e-12))
    L = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    act = _activation(config.get("hidden_act", "gelu_new"))
    B, T = input_ids.shape
    mask = attention_mask.to(dtype)

    # embeddings: word + position + token type 0, LayerNorm, then E -> H
    positions = torch.arange(T)
    token_types = torch.zeros(B, T, dtype=torch.long)
    e = (sd["embeddings.word_embeddings.weight"][input_ids]
         + sd["embeddings.position_embeddings.weight"][positions][None]
         + sd["embeddings.token_type_embeddings.weight"][token_types])
    e = _layer_norm(e, sd["embeddings.LayerNorm.weight"], sd["embeddings.LayerNorm.bias"], eps)
    h = _dense(e, sd, "encoder.embedding_hidden_mapping_in")
    H = h.shape[-1]
    d = H // heads
    ext = (1.0 - mask)[:, None, None, :] * torch.finfo(dtype).min  # HF's extended attention mask
    p = "encoder.albert_layer_groups.0.albert_layers.0."

    def split(x):  # [B, T, H] -> [B, heads, T, d]
        return x.view(B, T, heads, d).permute(0, 2, 1, 3)

    def layer(x):
        q, k, v = (split(_dense(x, sd, p + "attention." + n)) for n in ("query", "key", "value"))
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d) + ext
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.einsum("bhqk,bhkd->bhqd", probs, v).permute(0, 2, 1, 3).reshape(B, T, H)
        attn = _layer_norm(x + _dense(ctx, sd, p + "attention.dense"),
                           sd[p + "attention.LayerNorm.weight"], sd[p + "attention.LayerNorm.bias"], eps)
        ffn = _dense(act(_dense(attn, sd, p + "ffn")), sd, p + "ffn_output")
        return _layer_norm(ffn + attn, sd[p + "full_layer_layer_norm.weight"],
                           sd[p + "full_layer_layer_norm.bias"], eps)

    n = L if n_steps is None else int(n_steps)
    if n == L:
        for _ in range(L):
            h = layer(h)
    else:
        dt = L / n
        for _ in range(n):
            h = h + dt * (layer(h) - h)

    out = {"hidden": h}
    out["mean"] = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    out["cls"] = h[:, 0]
    if "pooler.weight" in sd:
        out["pooler"] = torch.tanh(_dense(h[:, 0], sd, "pooler"))
        if "classifier.weight" in sd:
            out["logits"] = _dense(out["pooler"], sd, "classifier")
    return out
