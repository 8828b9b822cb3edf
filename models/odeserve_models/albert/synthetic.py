"""Small random ALBERT checkpoints in Hugging Face's layout, for tests (Python here, and any
C++/end-to-end test that wants a checkpoint to import):

    from odeserve_models.albert.synthetic import write_synthetic_checkpoint
    info = write_synthetic_checkpoint("/tmp/ckpt", format="safetensors", task="classification")

writes `config.json` (Hugging Face field names), `model.safetensors` (this module's own writer,
the inverse of checkpoint.SafetensorsFile) or `pytorch_model.bin`, `tokenizer_config.json` and an
`spiece.model` trained here (about 0.1 s) with ALBERT's layout: <pad> 0, <unk> 1, control pieces
[CLS] 2, [SEP] 3, [MASK] 4, ALBERT's user-defined punctuation pieces, unigram, nmt_nfkc.
"""
import functools
import io
import json
import os
import random
from collections import OrderedDict
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np
import torch

from .checkpoint import LAYER

# dtype -> (safetensors name, numpy little-endian dtype of the raw bytes)
_ST_WRITE = {
    torch.float64: ("F64", "<f8"), torch.float32: ("F32", "<f4"), torch.float16: ("F16", "<f2"),
    torch.bfloat16: ("BF16", "<i2"), torch.int64: ("I64", "<i8"), torch.int32: ("I32", "<i4"),
    torch.int16: ("I16", "<i2"), torch.int8: ("I8", "i1"), torch.uint8: ("U8", "u1"), torch.bool: ("BOOL", "u1"),
}


def write_safetensors(path: str, tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None) -> None:
    """The safetensors format as the reference implementation writes it: tensors ordered by
    dtype size (largest first) then name, packed back to back; the JSON header padded with
    spaces to a multiple of 8 bytes."""
    def key(item):
        name, t = item
        return (-t.element_size(), name)
    items = sorted(tensors.items(), key=key)
    header, blobs, offset = OrderedDict(), [], 0
    if metadata is not None:
        header["__metadata__"] = dict(metadata)
    for name, t in items:
        st_name, np_dtype = _ST_WRITE[t.dtype]
        t = t.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            arr = t.view(torch.int16).numpy()
        elif t.dtype == torch.bool:
            arr = t.to(torch.uint8).numpy()
        else:
            arr = t.numpy()
        data = np.ascontiguousarray(arr).astype(np_dtype, copy=False).tobytes()
        header[name] = dict(dtype=st_name, shape=list(t.shape), data_offsets=[offset, offset + len(data)])
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


# --------------------------------------------------------------------------- the tokenizer

_WORDS = {
    "en": "the model reads every sentence and returns one vector for each input while the server "
          "chooses how many steps to run under a latency budget small large fast slow quiet river "
          "mountain city library package version release kernel driver window music garden".split(),
    "de": "der die das Straße Größe Fußball schön grün Mädchen Bücher über Brücke Wörter Käse "
          "heißen weiß groß Übersetzung Geschwindigkeit Schlüssel Märchen fünf zwölf".split(),
    "fr": "le la les été café élève garçon naïve où déjà français crème brûlée hôpital fenêtre "
          "cœur noël très après forêt château".split(),
    "es": "el niño año mañana canción corazón información pequeño señor árbol está también "
          "jalapeño música".split(),
    "misc": "Ångström façade résumé smörgåsbord crème naïveté São Paulo Zürich Kraków Dvořák "
            "İstanbul Ελλάδα λόγος Москва привет".split(),
}
_CJK = ["東京は日本の首都です", "我喜欢学习语言", "今日は良い天気ですね", "北京大学", "서울은 한국의 수도입니다",
        "こんにちは世界", "中文分词测试", "数据模型服务器"]
_EMOJI = ["😀", "🚀", "👍", "🎉", "❤️", "🇩🇪", "👩‍💻", "☕"]


def multilingual_lines(n: int = 400, seed: int = 0) -> List[str]:
    """Varied text: several languages with accents and ß, CJK, numbers with thousands commas and
    trailing commas ("1998,"), quotes (`` and ''), emoji, odd spacing."""
    rng = random.Random(seed)
    langs = list(_WORDS)
    lines = []
    for i in range(n):
        words = _WORDS[langs[i % len(langs)]]
        parts = [rng.choice(words) for _ in range(rng.randint(4, 12))]
        r = rng.random()
        if r < 0.25:
            parts.insert(rng.randrange(len(parts) + 1), "%d,%03d" % (rng.randint(1, 999), rng.randint(0, 999)))
        elif r < 0.45:
            parts.insert(rng.randrange(len(parts) + 1), "%d," % rng.randint(1900, 2030))
        elif r < 0.55:
            parts.insert(rng.randrange(len(parts) + 1), "``%s''" % rng.choice(words))
        if rng.random() < 0.3:
            parts.append(rng.choice(_CJK))
        if rng.random() < 0.2:
            parts.append(rng.choice(_EMOJI))
        if rng.random() < 0.1:
            parts.insert(0, "(%s)" % rng.choice(words))
        line = " ".join(parts) + rng.choice([".", "!", "?", "", " - ok", " €5", " £3"])
        lines.append(line[0].upper() + line[1:] if i % 3 == 0 else line)
    return lines


@functools.lru_cache(maxsize=8)
def spiece_model_bytes(vocab_size: int = 600, seed: int = 0) -> bytes:
    """A SentencePiece model laid out as ALBERT's spiece.model (trained in memory, deterministic)."""
    import sentencepiece as spm
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(multilingual_lines(400, seed)), model_writer=out, vocab_size=vocab_size,
        model_type="unigram", pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, pad_piece="<pad>", unk_piece="<unk>",
        control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        user_defined_symbols=["(", ")", '"', "-", ".", "\u2013", "\u00a3", "\u20ac"],
        normalization_rule_name="nmt_nfkc", character_coverage=1.0, shuffle_input_sentence=False,
        num_threads=1, minloglevel=2, hard_vocab_limit=False)
    return out.getvalue()


def spiece_piece_count(model: bytes) -> int:
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(model)
    return sp.GetPieceSize()


# --------------------------------------------------------------------------- the weights

def synthetic_config(vocab_size: int, *, layers: int = 3, embedding_size: int = 16, hidden_size: int = 32,
                     num_attention_heads: int = 4, intermediate_size: int = 64, max_position_embeddings: int = 64,
                     hidden_act: str = "gelu_new", labels: Sequence[str] = (), task: str = "embedding") -> dict:
    cfg = OrderedDict(
        architectures=["AlbertForSequenceClassification" if task == "classification" else "AlbertForMaskedLM"],
        model_type="albert", vocab_size=vocab_size, embedding_size=embedding_size, hidden_size=hidden_size,
        num_hidden_layers=layers, num_hidden_groups=1, num_attention_heads=num_attention_heads,
        intermediate_size=intermediate_size, inner_group_num=1, hidden_act=hidden_act,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.1,
        max_position_embeddings=max_position_embeddings, type_vocab_size=2, initializer_range=0.02,
        layer_norm_eps=1e-12, position_embedding_type="absolute", pad_token_id=0, bos_token_id=2,
        eos_token_id=3)
    if task == "classification":
        cfg["id2label"] = OrderedDict((str(i), l) for i, l in enumerate(labels))
        cfg["label2id"] = OrderedDict((l, i) for i, l in enumerate(labels))
    return cfg


def synthetic_state_dict(cfg: dict, *, seed: int = 0, with_pooler: bool = True, num_labels: int = 0,
                         gain: float = 1.6) -> "OrderedDict[str, torch.Tensor]":
    """Random weights under the unprefixed Hugging Face names (+ classifier.*). Linear weights are
    N(0, gain^2 / fan_in), LayerNorm weights 1 + N(0, 0.3^2) and biases N(0, 0.2^2): a layer that
    moves its input a lot (step counts matter) while every state stays O(1); the pooler's gain is
    0.5."""
    g = torch.Generator().manual_seed(seed)
    V, E, H = cfg["vocab_size"], cfg["embedding_size"], cfg["hidden_size"]
    P, TV, I = cfg["max_position_embeddings"], cfg["type_vocab_size"], cfg["intermediate_size"]

    def n(*shape, std=1.0):
        return torch.randn(*shape, generator=g) * std

    def lin(out_f, in_f, name, sd, gain=gain):
        sd[name + ".weight"] = n(out_f, in_f, std=gain / in_f ** 0.5)
        sd[name + ".bias"] = n(out_f, std=0.2)

    def ln(dim, name, sd):
        sd[name + ".weight"] = 1.0 + n(dim, std=0.3)
        sd[name + ".bias"] = n(dim, std=0.2)

    sd = OrderedDict()
    sd["embeddings.word_embeddings.weight"] = n(V, E)
    sd["embeddings.position_embeddings.weight"] = n(P, E, std=0.5)
    sd["embeddings.token_type_embeddings.weight"] = n(TV, E, std=0.5)
    ln(E, "embeddings.LayerNorm", sd)
    lin(H, E, "encoder.embedding_hidden_mapping_in", sd)
    for name in ("attention.query", "attention.key", "attention.value", "attention.dense"):
        lin(H, H, LAYER + name, sd)
    ln(H, LAYER + "attention.LayerNorm", sd)
    lin(I, H, LAYER + "ffn", sd)
    lin(H, I, LAYER + "ffn_output", sd)
    ln(H, LAYER + "full_layer_layer_norm", sd)
    if with_pooler:
        lin(H, H, "pooler", sd, gain=0.5)  # keeps tanh off saturation, so pooled outputs stay sensitive
    if num_labels:
        lin(num_labels, H, "classifier", sd)
    return sd


def write_synthetic_checkpoint(folder: str, *, format: str = "safetensors", with_prefix: bool = True,
                               task: str = "embedding", layers: int = 3, seed: int = 0,
                               vocab_pieces: int = 600, embedding_size: int = 16, hidden_size: int = 32,
                               num_attention_heads: int = 4, intermediate_size: int = 64,
                               max_position_embeddings: int = 64, hidden_act: str = "gelu_new",
                               labels: Sequence[str] = ("negative", "neutral", "positive"),
                               dtype: torch.dtype = torch.float32, with_pooler: bool = True,
                               extra_keys: bool = True, tokenizer_config: Optional[dict] = None,
                               config_overrides: Optional[dict] = None, drop_keys: Iterable[str] = (),
                               replace_tensors: Optional[Dict[str, torch.Tensor]] = None) -> dict:
    """Write a random ALBERT checkpoint folder. format: "safetensors" | "bin"; with_prefix: keys
    `albert.*` (AlbertForMaskedLM / AlbertForSequenceClassification) or bare (AlbertModel);
    task "classification" adds classifier.* and id2label. extra_keys adds what real checkpoints
    carry and the importer must ignore (`predictions.*` with the prefix, the int64 position_ids
    buffer). dtype: the stored float dtype. tokenizer_config: tokenizer_config.json's contents
    (default: HF's AlbertTokenizer defaults written out; {} for no file). config_overrides,
    drop_keys (full stored names), replace_tensors (full name -> tensor) build broken checkpoints.
    Returns dict(config, state_dict (as stored), folder, spiece)."""
    if format not in ("safetensors", "bin"):
        raise ValueError("format must be safetensors or bin")
    if task not in ("embedding", "classification"):
        raise ValueError("task must be embedding or classification")
    os.makedirs(folder, exist_ok=True)
    spiece = spiece_model_bytes(vocab_pieces, 0)
    V = spiece_piece_count(spiece)
    labels = list(labels) if task == "classification" else []
    cfg = synthetic_config(V, layers=layers, embedding_size=embedding_size, hidden_size=hidden_size,
                           num_attention_heads=num_attention_heads, intermediate_size=intermediate_size,
                           max_position_embeddings=max_position_embeddings, hidden_act=hidden_act,
                           labels=labels, task=task)
    sd = synthetic_state_dict(cfg, seed=seed, with_pooler=with_pooler, num_labels=len(labels))
    prefix = "albert." if with_prefix else ""
    stored = OrderedDict()
    for k, v in sd.items():
        stored[k if k.startswith("classifier.") else prefix + k] = v.to(dtype)
    if extra_keys:
        stored[prefix + "embeddings.position_ids"] = torch.arange(max_position_embeddings).unsqueeze(0)
        if with_prefix and task == "embedding":  # AlbertForMaskedLM's head
            g = torch.Generator().manual_seed(seed + 1)
            stored["predictions.bias"] = torch.zeros(V, dtype=dtype)
            stored["predictions.dense.weight"] = torch.randn(embedding_size, hidden_size, generator=g).to(dtype)
            stored["predictions.dense.bias"] = torch.zeros(embedding_size, dtype=dtype)
            stored["predictions.LayerNorm.weight"] = torch.ones(embedding_size, dtype=dtype)
            stored["predictions.LayerNorm.bias"] = torch.zeros(embedding_size, dtype=dtype)
            stored["predictions.decoder.bias"] = torch.zeros(V, dtype=dtype)
    for k in drop_keys:
        stored.pop(k)
    for k, v in (replace_tensors or {}).items():
        stored[k] = v
    if config_overrides:
        cfg.update(config_overrides)

    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
    if tokenizer_config is None:
        tokenizer_config = dict(do_lower_case=True, keep_accents=False, remove_space=True, bos_token="[CLS]",
                                eos_token="[SEP]", unk_token="<unk>", sep_token="[SEP]", pad_token="<pad>",
                                cls_token="[CLS]", mask_token="[MASK]", model_max_length=max_position_embeddings,
                                tokenizer_class="AlbertTokenizer")
    if tokenizer_config:
        with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer_config, f, indent=2)
    with open(os.path.join(folder, "spiece.model"), "wb") as f:
        f.write(spiece)
    if format == "safetensors":
        write_safetensors(os.path.join(folder, "model.safetensors"), stored, metadata={"format": "pt"})
    else:
        torch.save(stored, os.path.join(folder, "pytorch_model.bin"))
    return dict(config=cfg, state_dict=stored, folder=folder, spiece=os.path.join(folder, "spiece.model"))
