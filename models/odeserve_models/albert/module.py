"""The TorchScript module of an imported ALBERT (docs/MODEL_CONTRACT.md).

ALBERT (Lan et al. 2019; Hugging Face AlbertModel) applies one post-LN layer L times:

    a = LayerNorm(h + Dense(Attention(h)))
    layer(h) = LayerNorm(a + FFNOut(act(FFN(a))))

so `vector_field(h) = layer(h) - h` makes L Euler steps of dt = 1 the model itself. The
embeddings (word + position + token type 0, LayerNorm, then the E -> H mapping) are the input
stage; pooling (mean over the mask, the first position, or the pooler tanh(Dense(h[:, 0]))) and
the AlbertForSequenceClassification head are the output stage.

Pad positions never reach a real position: their ids are read as 0, their states as zeros inside
the field (whatever the server left there, even inf or NaN), attention adds a large negative
bias at them, and the field is zero there.
"""
import math
from typing import Dict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# hidden_act -> code the scripted module branches on
ACTIVATIONS = {"gelu_new": 0, "gelu_fast": 0, "gelu_pytorch_tanh": 0, "gelu": 1, "relu": 2}
POOLINGS = {"mean": 1, "cls": 2, "pooler": 3}  # values = odeserve.v1.Pooling (MEAN, FIRST, POOLER)


class AlbertOdeModule(nn.Module):
    trained_depth: int
    num_heads: int
    head_dim: int
    eps: float
    scale: float
    activation: int
    pooling: int
    classify: bool
    native_field: str

    def __init__(self, tensors: Dict[str, Tensor], config: dict, pooling: str, classify: bool):
        """tensors: unprefixed Hugging Face names (checkpoint.expected_shapes) -> float32."""
        super().__init__()
        layer = "encoder.albert_layer_groups.0.albert_layers.0."
        H, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
        self.trained_depth = int(config["num_hidden_layers"])
        self.num_heads = heads
        self.head_dim = H // heads
        self.eps = float(config["layer_norm_eps"])
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.activation = ACTIVATIONS[config["hidden_act"]]
        if classify and pooling != "pooler":
            raise ValueError("classification runs the checkpoint's pooler and classifier head")
        self.pooling = POOLINGS[pooling]
        self.classify = classify
        # docs/MODEL_CONTRACT.md, "Native fields": the server may evaluate _layer natively, reading
        # q_w ... out_ln_b, num_heads, head_dim, eps, scale and activation by name.
        self.native_field = "albert_post_ln"

        def P(name: str) -> nn.Parameter:
            return nn.Parameter(tensors[name].detach().to(torch.float32).clone(), requires_grad=False)

        self.word_embeddings = P("embeddings.word_embeddings.weight")
        self.position_embeddings = P("embeddings.position_embeddings.weight")
        self.token_type_embeddings = P("embeddings.token_type_embeddings.weight")
        self.emb_ln_w = P("embeddings.LayerNorm.weight")
        self.emb_ln_b = P("embeddings.LayerNorm.bias")
        self.map_w = P("encoder.embedding_hidden_mapping_in.weight")
        self.map_b = P("encoder.embedding_hidden_mapping_in.bias")
        self.q_w, self.q_b = P(layer + "attention.query.weight"), P(layer + "attention.query.bias")
        self.k_w, self.k_b = P(layer + "attention.key.weight"), P(layer + "attention.key.bias")
        self.v_w, self.v_b = P(layer + "attention.value.weight"), P(layer + "attention.value.bias")
        self.o_w, self.o_b = P(layer + "attention.dense.weight"), P(layer + "attention.dense.bias")
        self.attn_ln_w = P(layer + "attention.LayerNorm.weight")
        self.attn_ln_b = P(layer + "attention.LayerNorm.bias")
        self.ffn_w, self.ffn_b = P(layer + "ffn.weight"), P(layer + "ffn.bias")
        self.ffn_out_w, self.ffn_out_b = P(layer + "ffn_output.weight"), P(layer + "ffn_output.bias")
        self.out_ln_w = P(layer + "full_layer_layer_norm.weight")
        self.out_ln_b = P(layer + "full_layer_layer_norm.bias")
        # Weights the chosen output stage does not read are empty buffers: TorchScript compiles
        # every branch, and the parameter count stays that of what the model computes.
        empty = torch.zeros(0)
        if self.pooling == 3:
            self.pooler_w, self.pooler_b = P("pooler.weight"), P("pooler.bias")
        else:
            self.register_buffer("pooler_w", empty.clone())
            self.register_buffer("pooler_b", empty.clone())
        if classify:
            self.classifier_w, self.classifier_b = P("classifier.weight"), P("classifier.bias")
        else:
            self.register_buffer("classifier_w", empty.clone())
            self.register_buffer("classifier_b", empty.clone())

    def _ln(self, x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        return F.layer_norm(x, [w.shape[0]], w, b, self.eps)

    def _act(self, x: Tensor) -> Tensor:
        if self.activation == 0:  # gelu_new: the tanh approximation
            return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
        if self.activation == 1:  # gelu: erf
            return F.gelu(x)
        return torch.relu(x)

    def _layer(self, h: Tensor, bias: Tensor) -> Tensor:
        """ALBERT's shared layer; bias [B, 1, 1, T] is the additive attention mask."""
        B, T = h.shape[0], h.shape[1]
        q = F.linear(h, self.q_w, self.q_b).reshape(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = F.linear(h, self.k_w, self.k_b).reshape(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        v = F.linear(h, self.v_w, self.v_b).reshape(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale + bias
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, self.num_heads * self.head_dim)
        a = self._ln(F.linear(ctx, self.o_w, self.o_b) + h, self.attn_ln_w, self.attn_ln_b)
        f = F.linear(self._act(F.linear(a, self.ffn_w, self.ffn_b)), self.ffn_out_w, self.ffn_out_b)
        return self._ln(f + a, self.out_ln_w, self.out_ln_b)

    @torch.jit.export
    def prepare(self) -> None:
        pass

    @torch.jit.export
    def input_stage(self, x: Tensor, mask: Tensor) -> Tensor:
        T = x.shape[1]
        x = torch.where(mask > 0, x, torch.zeros_like(x))
        e = F.embedding(x, self.word_embeddings) + self.position_embeddings[:T].unsqueeze(0) \
            + self.token_type_embeddings[0]
        e = self._ln(e, self.emb_ln_w, self.emb_ln_b)
        return F.linear(e, self.map_w, self.map_b)

    @torch.jit.export
    def vector_field(self, h: Tensor, mask: Tensor) -> Tensor:
        keep = mask.unsqueeze(-1) > 0
        h = torch.where(keep, h.float(), torch.zeros_like(h, dtype=torch.float32))
        bias = ((1.0 - mask) * -1.0e9).unsqueeze(1).unsqueeze(2)
        f = self._layer(h, bias).float() - h
        return torch.where(keep, f, torch.zeros_like(f))

    @torch.jit.export
    def output_stage(self, h: Tensor, mask: Tensor) -> Tensor:
        h = h.float()
        if self.pooling == 1:
            keep = mask.unsqueeze(-1) > 0
            s = torch.where(keep, h, torch.zeros_like(h)).sum(1)
            return s / mask.sum(1, keepdim=True).clamp(min=1.0)
        first = h[:, 0]
        if self.pooling == 2:
            return first
        pooled = torch.tanh(F.linear(first, self.pooler_w, self.pooler_b))
        if self.classify:
            return F.linear(pooled, self.classifier_w, self.classifier_b)
        return pooled

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.input_stage(x, mask)
        for _ in range(self.trained_depth):
            h = h + self.vector_field(h, mask)
        return self.output_stage(h, mask)


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
