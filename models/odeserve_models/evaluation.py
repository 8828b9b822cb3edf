"""Evaluation through the Python mirror of the server's solver loop."""
import json
import os
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch

from . import families
from .baselines import macro_f1, recall_at_k
from .data import Encoded
from .hashing import PieceHasher
from .lexical import EmbeddingProbeClassifier, LexicalClassifier, piece_feature_table
from .solvers import solve
from .text import Tokenizer


class Runner:
    """Caches input_stage outputs per text set so a steps/solver sweep pays it once."""

    def __init__(self, model, enc: Encoded, batch: int = 64):
        self.model, self.enc, self.batch = model, enc, batch
        self.cache: Dict[int, List[Tuple[np.ndarray, torch.Tensor, torch.Tensor]]] = {}

    @torch.no_grad()
    def _h0(self, texts: Sequence[str]):
        key = hash(tuple(texts))
        if key not in self.cache:
            seqs = self.enc.encode(list(texts))
            order = np.argsort([len(s) for s in seqs], kind="stable")
            chunks = []
            for i in range(0, len(order), self.batch):
                idx = order[i:i + self.batch]
                x, m = self.enc.collate([seqs[j] for j in idx])
                chunks.append((idx, self.model.input_stage(x, m), m))
            self.cache = {key: chunks} if len(self.cache) > 6 else {**self.cache, key: chunks}
        return self.cache[key]

    @torch.no_grad()
    def outputs(self, texts: Sequence[str], steps: int, solver: str = "EULER") -> np.ndarray:
        return self._per_text(texts, lambda h0, m: (self.model.output_stage(solve(self.model, h0, m, steps, solver), m),))[0]

    @torch.no_grad()
    def expert_outputs(self, texts: Sequence[str], steps: int) -> Dict[str, np.ndarray]:
        """A product-of-experts classifier's experts alone after `steps` Euler steps, as
        log-probabilities: "encoder" and "lexical" (LexicalClassifier; the lexical channels are the
        same at every step), and "probe" (EmbeddingProbeClassifier)."""
        probe = hasattr(self.model, "probe_logprobs")

        def experts(h0, m):
            h = solve(self.model, h0, m, steps, "EULER")
            return self.model.experts(h, m) + ((self.model.probe_logprobs(h, m),) if probe else ())
        return dict(zip(("encoder", "lexical", "probe"), self._per_text(texts, experts)))

    def _per_text(self, texts: Sequence[str], compute) -> Tuple[np.ndarray, ...]:
        """compute(h0, mask) -> a tuple of [rows, ...] tensors per chunk; the arrays in text order."""
        outs = None
        for idx, h0, m in self._h0(texts):
            ys = [y.numpy() for y in compute(h0, m)]
            if outs is None:
                outs = [np.empty((len(texts),) + y.shape[1:], y.dtype) for y in ys]
            for out, y in zip(outs, ys):
                out[idx] = y
        return tuple(outs)


def classification_metrics(logits: np.ndarray, y: np.ndarray, n_classes: int) -> Dict[str, float]:
    pred = logits.argmax(1)
    return {"accuracy": float((pred == y).mean()), "macro_f1": macro_f1(y, pred, n_classes)}


def retrieval_metrics(q: np.ndarray, c: np.ndarray) -> Dict[str, float]:
    q = q / (np.linalg.norm(q, axis=1, keepdims=True) + 1e-12)
    c = c / (np.linalg.norm(c, axis=1, keepdims=True) + 1e-12)
    r = recall_at_k(q @ c.T, (1, 10))
    return {"recall@1": r[1], "recall@10": r[10]}


def load_run(run_dir: str, task: str, which: str = "final.pt"):
    """Eager model from a training run. task EMBEDDING: head = contrastive projection;
    CLASSIFICATION: head = the (English-only) section classifier."""
    with open(os.path.join(run_dir, "args.json")) as f:
        a = json.load(f)
    ck = torch.load(os.path.join(run_dir, which), map_location="cpu")
    labels = a["labels"]
    common = dict(hidden=a["hidden"], heads=a["heads"], ffn=a["ffn"], trained_depth=a["depth"],
                  max_len=a["max_len"], out_dim=a["hidden"] if task == "EMBEDDING" else len(labels))
    hasher = None
    if a["family"] == "eelbert":
        model = families.build("eelbert", hash_dim=a["hash_dim"], **common)
        hasher = PieceHasher(a["hash_seed"], a["hash_dim"], [2, 3, 4])
    else:
        model = families.build(a["family"], vocab=a["vocab"], emb=a["emb"], **common)
    sd = dict(ck["model"])
    for k in [k for k in sd if k in families.PREPARED_MATRICES and a["family"] == "sharebert"]:
        del sd[k]
    if task == "CLASSIFICATION":
        sd["head.weight"] = ck["cls"]["weight"]; sd["head.bias"] = ck["cls"]["bias"]
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and all(k in families.PREPARED_MATRICES for k in missing), (missing, unexpected)
    tok = Tokenizer(a["tokenizer"], a["max_len"], hasher=hasher)
    if task == "CLASSIFICATION" and "lexical" in ck:
        lx = ck["lexical"]
        experts = dict(buckets=lx["buckets"], weight=lx["weight"], length_power=lx["length_power"])
        if "probe" in ck:  # odeserve_models/train/train_embedding_probe.py: a third expert on embed-eelbert's embedding
            pr = ck["probe"]
            embedder = families.build("eelbert", **pr["embedder_config"])
            embedder.load_state_dict(pr["embedder"])
            h = pr["hash"]
            table = piece_feature_table(a["tokenizer"], h["seed"], h["dim"], h["orders"])
            model = EmbeddingProbeClassifier(model, a["vocab"], len(labels), embedder, table,
                                             eos_id=tok.sp.eos_id(),
                                             probe_weight=pr["product_weight"], probe_scale=pr["scale"], **experts)
            model.probe.weight.data.copy_(pr["linear"]["weight"]); model.probe.bias.data.copy_(pr["linear"]["bias"])
        else:
            model = LexicalClassifier(model, a["vocab"], len(labels), **experts)
        model.lexical.data.copy_(lx["table"]); model.lexical_bias.data.copy_(lx["bias"])
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    model.prepare()
    return model, Encoded(tok), a, labels
