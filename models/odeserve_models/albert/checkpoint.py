"""Reading a Hugging Face ALBERT checkpoint folder.

The folder holds `config.json`, the weights (`model.safetensors`, or `pytorch_model.bin`, or
either one sharded with its `*.index.json`), `spiece.model` and optionally
`tokenizer_config.json`. Keys may carry the `albert.` prefix (AlbertForSequenceClassification,
AlbertForMaskedLM, AlbertForPreTraining) or not (AlbertModel); the pre-training heads
(`predictions.*`, `sop_classifier.*`) are ignored.

Every problem is a CheckpointError whose message names the file, key or field at fault.
"""
import json
import mmap
import os
from collections import OrderedDict
from typing import Dict, Iterable, List, Sequence, Tuple

import numpy as np
import torch


class CheckpointError(Exception):
    """A checkpoint the importer cannot turn into an odeserve model; the message says why."""


# Hugging Face AlbertConfig's defaults: a config.json written by `save_pretrained` omits none of
# these, but hand-written ones may, and transformers itself falls back to these values.
HF_CONFIG_DEFAULTS = dict(
    vocab_size=30000, embedding_size=128, hidden_size=4096, num_hidden_layers=12,
    num_hidden_groups=1, num_attention_heads=64, intermediate_size=16384, inner_group_num=1,
    hidden_act="gelu_new", max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12,
    position_embedding_type="absolute",
)

# HF AlbertTokenizer's defaults for the options odeserve's server mirrors.
HF_TOKENIZER_DEFAULTS = dict(do_lower_case=True, keep_accents=False, remove_space=True)

# hidden_act -> the activation the module computes (module.ACTIVATIONS)
SUPPORTED_ACTIVATIONS = ("gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu", "relu")

LAYER = "encoder.albert_layer_groups.0.albert_layers.0."
IGNORED_PREFIXES = ("predictions.", "sop_classifier.")

SAFETENSORS_DTYPES = {
    # name: (numpy dtype (little-endian) to read the raw bytes with, torch dtype returned)
    "F64": ("<f8", torch.float64),
    "F32": ("<f4", torch.float32),
    "F16": ("<f2", torch.float16),
    "BF16": ("<i2", torch.bfloat16),  # read as int16, reinterpreted
    "I64": ("<i8", torch.int64),
    "I32": ("<i4", torch.int32),
    "I16": ("<i2", torch.int16),
    "I8": ("i1", torch.int8),
    "U8": ("u1", torch.uint8),
    "BOOL": ("u1", torch.bool),
}


# --------------------------------------------------------------------------- safetensors

class SafetensorsFile:
    """A parsed `.safetensors` file: an 8-byte little-endian u64 header length, that many bytes
    of JSON {name: {dtype, shape, data_offsets: [begin, end]}, optional "__metadata__"}, then the
    raw little-endian buffers (offsets relative to the end of the header). Tensors are read on
    request, so an unsupported dtype only matters for a tensor that is actually used."""

    def __init__(self, path: str):
        self.path = path
        self.name = os.path.basename(path)
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise CheckpointError("%s: %d bytes, too short for a safetensors header" % (path, size))
            n = int.from_bytes(f.read(8), "little")
            if n > size - 8:
                raise CheckpointError("%s: header length %d exceeds the file (%d bytes)" % (path, n, size))
            try:
                header = json.loads(f.read(n).decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise CheckpointError("%s: header is not JSON (%s)" % (path, e))
            if not isinstance(header, dict):
                raise CheckpointError("%s: header is not a JSON object" % path)
            self.metadata = header.pop("__metadata__", None) or {}
            self._data_start = 8 + n
            self._data_size = size - 8 - n
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size > 0 else None
        self.entries = OrderedDict()
        for key, e in header.items():
            if not isinstance(e, dict) or not {"dtype", "shape", "data_offsets"} <= set(e):
                raise CheckpointError("%s: tensor '%s' lacks dtype/shape/data_offsets" % (path, key))
            begin, end = e["data_offsets"]
            if not (0 <= begin <= end <= self._data_size):
                raise CheckpointError("%s: tensor '%s' has data_offsets [%d, %d] outside the %d data bytes"
                                      % (path, key, begin, end, self._data_size))
            self.entries[key] = (e["dtype"], [int(s) for s in e["shape"]], int(begin), int(end))

    def keys(self) -> List[str]:
        return list(self.entries)

    def dtype(self, key: str) -> str:
        return self.entries[key][0]

    def shape(self, key: str) -> List[int]:
        return list(self.entries[key][1])

    def get(self, key: str) -> torch.Tensor:
        dtype, shape, begin, end = self.entries[key]
        if dtype not in SAFETENSORS_DTYPES:
            raise CheckpointError("%s: tensor '%s' has dtype %s; supported: %s"
                                  % (self.name, key, dtype, ", ".join(SAFETENSORS_DTYPES)))
        np_dtype, torch_dtype = SAFETENSORS_DTYPES[dtype]
        np_dtype = np.dtype(np_dtype)
        count = int(np.prod(shape)) if shape else 1
        if (end - begin) != count * np_dtype.itemsize:
            raise CheckpointError("%s: tensor '%s' (%s %s) should take %d bytes, data_offsets give %d"
                                  % (self.name, key, dtype, shape, count * np_dtype.itemsize, end - begin))
        buf = np.frombuffer(self._map, dtype=np_dtype, count=count, offset=self._data_start + begin) \
            if count else np.zeros(0, dtype=np_dtype)
        arr = buf.astype(np_dtype.newbyteorder("="), copy=True)  # native order, owned, writable
        t = torch.from_numpy(arr)
        if torch_dtype == torch.bfloat16:
            t = t.view(torch.bfloat16)
        elif torch_dtype == torch.bool:
            t = t.to(torch.bool)
        return t.reshape(shape)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None


def read_safetensors(path: str) -> "OrderedDict[str, torch.Tensor]":
    """Every tensor of a .safetensors file, in header order, in its stored dtype."""
    f = SafetensorsFile(path)
    try:
        return OrderedDict((k, f.get(k)) for k in f.keys())
    finally:
        f.close()


# --------------------------------------------------------------------------- weight sources

class _Weights:
    """name -> (shape, loader) over one or several weight files."""

    def __init__(self, description: str):
        self.description = description
        self.shapes: Dict[str, List[int]] = OrderedDict()
        self._load = {}
        self._closers = []

    def add_safetensors(self, path: str) -> None:
        f = SafetensorsFile(path)
        self._closers.append(f.close)
        for k in f.keys():
            self.shapes[k] = f.shape(k)
            self._load[k] = (lambda f=f, k=k: f.get(k))

    def add_state_dict(self, path: str) -> None:
        try:
            try:
                sd = torch.load(path, map_location="cpu", weights_only=True)
            except TypeError:  # torch without weights_only
                sd = torch.load(path, map_location="cpu")
        except Exception as e:  # noqa: BLE001 - any unpickling problem
            raise CheckpointError("%s: cannot be read by torch.load (%s)" % (path, e))
        if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
            sd = sd["state_dict"]
        if not isinstance(sd, dict):
            raise CheckpointError("%s: holds a %s, not a state dict" % (path, type(sd).__name__))
        for k, v in sd.items():
            if isinstance(v, torch.Tensor):
                self.shapes[k] = list(v.shape)
                self._load[k] = (lambda v=v: v)

    def get(self, key: str) -> torch.Tensor:
        return self._load[key]()

    def close(self) -> None:
        for c in self._closers:
            c()


def _open_weights(folder: str) -> _Weights:
    def p(name):
        return os.path.join(folder, name)
    for single, index, kind in (("model.safetensors", "model.safetensors.index.json", "safetensors"),
                                ("pytorch_model.bin", "pytorch_model.bin.index.json", "bin")):
        files = []
        if os.path.isfile(p(single)):
            files = [p(single)]
        elif os.path.isfile(p(index)):
            try:
                with open(p(index), encoding="utf-8") as f:
                    weight_map = json.load(f)["weight_map"]
            except (ValueError, KeyError) as e:
                raise CheckpointError("%s: no readable weight_map (%s)" % (p(index), e))
            files = [p(n) for n in sorted(set(weight_map.values()))]
            for fn in files:
                if not os.path.isfile(fn):
                    raise CheckpointError("%s names shard %s, which is missing" % (index, os.path.basename(fn)))
        if files:
            w = _Weights(", ".join(os.path.basename(f) for f in files))
            for fn in files:
                w.add_safetensors(fn) if kind == "safetensors" else w.add_state_dict(fn)
            return w
    raise CheckpointError("%s: no model.safetensors or pytorch_model.bin (or a sharded *.index.json)" % folder)


# --------------------------------------------------------------------------- the checkpoint

def expected_shapes(cfg: dict, num_labels: int = 0) -> "OrderedDict[str, List[int]]":
    """HF key (without the `albert.` prefix) -> shape, for the encoder; `pooler.*` and (with
    num_labels) the unprefixed `classifier.*` are listed too."""
    V, E, H = cfg["vocab_size"], cfg["embedding_size"], cfg["hidden_size"]
    P, TV, I = cfg["max_position_embeddings"], cfg["type_vocab_size"], cfg["intermediate_size"]
    s = OrderedDict()
    s["embeddings.word_embeddings.weight"] = [V, E]
    s["embeddings.position_embeddings.weight"] = [P, E]
    s["embeddings.token_type_embeddings.weight"] = [TV, E]
    s["embeddings.LayerNorm.weight"] = [E]
    s["embeddings.LayerNorm.bias"] = [E]
    s["encoder.embedding_hidden_mapping_in.weight"] = [H, E]
    s["encoder.embedding_hidden_mapping_in.bias"] = [H]
    for n in ("attention.query", "attention.key", "attention.value", "attention.dense"):
        s[LAYER + n + ".weight"] = [H, H]
        s[LAYER + n + ".bias"] = [H]
    s[LAYER + "attention.LayerNorm.weight"] = [H]
    s[LAYER + "attention.LayerNorm.bias"] = [H]
    s[LAYER + "ffn.weight"] = [I, H]
    s[LAYER + "ffn.bias"] = [I]
    s[LAYER + "ffn_output.weight"] = [H, I]
    s[LAYER + "ffn_output.bias"] = [H]
    s[LAYER + "full_layer_layer_norm.weight"] = [H]
    s[LAYER + "full_layer_layer_norm.bias"] = [H]
    s["pooler.weight"] = [H, H]
    s["pooler.bias"] = [H]
    if num_labels:
        s["classifier.weight"] = [num_labels, H]
        s["classifier.bias"] = [num_labels]
    return s


ENCODER_KEYS = [k for k in expected_shapes(dict(vocab_size=1, embedding_size=1, hidden_size=1,
                                                max_position_embeddings=1, type_vocab_size=1,
                                                intermediate_size=1))
                if not k.startswith("pooler.")]
POOLER_KEYS = ["pooler.weight", "pooler.bias"]
CLASSIFIER_KEYS = ["classifier.weight", "classifier.bias"]


class Checkpoint:
    """A validated ALBERT checkpoint. `tensors` maps the unprefixed HF names (the keys of
    expected_shapes) to float32 tensors; pooler/classifier entries only when present."""

    def __init__(self):
        self.folder = ""
        self.config: dict = {}
        self.tensors: "OrderedDict[str, torch.Tensor]" = OrderedDict()
        self.prefix = ""
        self.weights_file = ""
        self.source_dtypes: Dict[str, str] = {}
        self.ignored_keys: List[str] = []
        self.spiece_path = ""
        self.piece_count = 0
        self.cls_id = -1
        self.sep_id = -1
        self.tokenizer_options = dict(HF_TOKENIZER_DEFAULTS)
        self.labels: List[str] = []

    @property
    def has_pooler(self) -> bool:
        return all(k in self.tensors for k in POOLER_KEYS)

    @property
    def has_classifier(self) -> bool:
        return all(k in self.tensors for k in CLASSIFIER_KEYS)

    def full_key(self, key: str) -> str:
        """The name the checkpoint stores `key` under."""
        return key if key.startswith("classifier.") else self.prefix + key


def _read_json(path: str, what: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except FileNotFoundError:
        raise CheckpointError("%s: missing (%s)" % (path, what))
    except ValueError as e:
        raise CheckpointError("%s: not valid JSON (%s)" % (path, e))
    if not isinstance(d, dict):
        raise CheckpointError("%s: not a JSON object" % path)
    return d


def read_config(folder: str) -> dict:
    raw = _read_json(os.path.join(folder, "config.json"), "the model's Hugging Face config")
    mt = raw.get("model_type", "albert")
    if mt != "albert":
        raise CheckpointError("config.json: model_type is '%s', not 'albert'" % mt)
    cfg = dict(HF_CONFIG_DEFAULTS)
    cfg.update(raw)
    for k in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_hidden_groups",
              "num_attention_heads", "intermediate_size", "inner_group_num", "max_position_embeddings",
              "type_vocab_size"):
        v = cfg[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise CheckpointError("config.json: %s must be a positive integer, not %r" % (k, v))
    if not isinstance(cfg["layer_norm_eps"], (int, float)) or cfg["layer_norm_eps"] <= 0:
        raise CheckpointError("config.json: layer_norm_eps must be a positive number, not %r" % cfg["layer_norm_eps"])
    if cfg["num_hidden_groups"] != 1:
        raise CheckpointError(
            "config.json: num_hidden_groups is %d; only 1 is supported (one layer shared by the whole depth "
            "is what makes the encoder one ODE field)" % cfg["num_hidden_groups"])
    if cfg["inner_group_num"] != 1:
        raise CheckpointError(
            "config.json: inner_group_num is %d; only 1 is supported (a group of several distinct layers "
            "repeated is not one autonomous ODE field)" % cfg["inner_group_num"])
    if cfg["hidden_act"] not in SUPPORTED_ACTIVATIONS:
        raise CheckpointError("config.json: hidden_act '%s' is not supported; supported: %s"
                              % (cfg["hidden_act"], ", ".join(SUPPORTED_ACTIVATIONS)))
    if cfg["position_embedding_type"] != "absolute":
        raise CheckpointError("config.json: position_embedding_type '%s' is not supported; only 'absolute'"
                              % cfg["position_embedding_type"])
    if cfg["hidden_size"] % cfg["num_attention_heads"]:
        raise CheckpointError("config.json: hidden_size %d is not a multiple of num_attention_heads %d"
                              % (cfg["hidden_size"], cfg["num_attention_heads"]))
    return cfg


def read_labels(cfg: dict, num_labels: int) -> List[str]:
    """Labels ordered by their integer id; LABEL_i when config.json has no id2label."""
    id2label = cfg.get("id2label")
    if not id2label:
        return ["LABEL_%d" % i for i in range(num_labels)]
    try:
        items = sorted((int(k), str(v)) for k, v in id2label.items())
    except (ValueError, AttributeError):
        raise CheckpointError("config.json: id2label keys must be integers, got %r" % (id2label,))
    ids = [i for i, _ in items]
    if ids != list(range(len(ids))):
        raise CheckpointError("config.json: id2label ids must be 0..%d, got %s" % (len(ids) - 1, ids))
    labels = [v for _, v in items]
    dup = sorted({v for v in labels if labels.count(v) > 1})
    if dup:
        raise CheckpointError("config.json: id2label names %s more than once" % ", ".join(repr(d) for d in dup))
    if any(not v for v in labels):
        raise CheckpointError("config.json: id2label has an empty label")
    return labels


def read_tokenizer_options(folder: str) -> dict:
    opts = dict(HF_TOKENIZER_DEFAULTS)
    path = os.path.join(folder, "tokenizer_config.json")
    if os.path.isfile(path):
        raw = _read_json(path, "tokenizer options")
        for k in opts:
            if k in raw:
                if not isinstance(raw[k], bool):
                    raise CheckpointError("tokenizer_config.json: %s must be true or false, not %r" % (k, raw[k]))
                opts[k] = raw[k]
    return opts


def read_spiece(path: str) -> Tuple[int, int, int]:
    """-> (piece count, [CLS] id, [SEP] id)."""
    import sentencepiece as spm
    if not os.path.isfile(path):
        raise CheckpointError("%s: missing (the SentencePiece model of HF's AlbertTokenizer; a "
                              "tokenizer.json alone is not supported)" % path)
    sp = spm.SentencePieceProcessor()
    try:
        sp.Load(path)
    except (OSError, RuntimeError) as e:
        raise CheckpointError("%s: not a SentencePiece model (%s)" % (path, e))
    ids = []
    for piece in ("[CLS]", "[SEP]"):
        i = sp.PieceToId(piece)
        if sp.IdToPiece(i) != piece:
            raise CheckpointError("spiece.model: has no %s piece (ALBERT wraps every input in [CLS] ... [SEP])"
                                  % piece)
        ids.append(i)
    return sp.GetPieceSize(), ids[0], ids[1]


def load_checkpoint(folder: str, need: Sequence[str] = ()) -> Checkpoint:
    """Read and validate `folder`. need: any of "pooler", "classifier": refuse without them."""
    if not os.path.isdir(folder):
        raise CheckpointError("%s: not a folder" % folder)
    ck = Checkpoint()
    ck.folder = folder
    ck.config = cfg = read_config(folder)
    ck.tokenizer_options = read_tokenizer_options(folder)
    ck.spiece_path = os.path.join(folder, "spiece.model")
    ck.piece_count, ck.cls_id, ck.sep_id = read_spiece(ck.spiece_path)
    if cfg["vocab_size"] != ck.piece_count:
        raise CheckpointError("config.json: vocab_size is %d but spiece.model has %d pieces"
                              % (cfg["vocab_size"], ck.piece_count))

    w = _open_weights(folder)
    try:
        ck.weights_file = w.description
        keys = set(w.shapes)
        first = "embeddings.word_embeddings.weight"
        if "albert." + first in keys:
            ck.prefix = "albert."
        elif first in keys:
            ck.prefix = ""
        else:
            raise CheckpointError("%s: missing tensor 'albert.%s' (nor '%s' without the prefix)"
                                  % (w.description, first, first))
        num_labels = 0
        if "classifier.weight" in keys:
            # config.json's id2label decides; a classifier that disagrees fails the shape check
            shape = w.shapes["classifier.weight"]
            num_labels = len(cfg.get("id2label") or {}) or (shape[0] if shape else 0) or 1
        shapes = expected_shapes(cfg, num_labels)
        for k in ENCODER_KEYS:
            if ck.full_key(k) not in keys:
                raise CheckpointError("%s: missing tensor '%s'" % (w.description, ck.full_key(k)))
        wanted = list(ENCODER_KEYS)
        for group, name in ((POOLER_KEYS, "pooler"), (CLASSIFIER_KEYS, "classifier")):
            present = [k for k in group if ck.full_key(k) in keys]
            if present and len(present) < len(group):
                missing = [ck.full_key(k) for k in group if k not in present]
                raise CheckpointError("%s: missing tensor '%s'" % (w.description, missing[0]))
            if present:
                wanted += group
            elif name in need:
                raise CheckpointError("%s: missing tensor '%s' (the %s weights)"
                                      % (w.description, ck.full_key(group[0]), name))
        for k in wanted:
            full = ck.full_key(k)
            if list(w.shapes[full]) != shapes[k]:
                raise CheckpointError("%s: tensor '%s' has shape %s, expected %s"
                                      % (w.description, full, list(w.shapes[full]), shapes[k]))
        for k in wanted:
            full = ck.full_key(k)
            t = w.get(full)
            if not t.is_floating_point():
                raise CheckpointError("%s: tensor '%s' has dtype %s, expected a floating-point type"
                                      % (w.description, full, t.dtype))
            ck.source_dtypes[k] = str(t.dtype).replace("torch.", "")
            t = t.to(torch.float32).contiguous()
            if not bool(torch.isfinite(t).all()):
                raise CheckpointError("%s: tensor '%s' holds NaN or infinite values" % (w.description, full))
            ck.tensors[k] = t
        used = {ck.full_key(k) for k in wanted}
        ck.ignored_keys = sorted(k for k in keys if k not in used)
        if ck.has_classifier:
            if cfg.get("problem_type") == "regression":
                raise CheckpointError("config.json: problem_type 'regression': the classifier outputs a "
                                      "score, not class logits")
            ck.labels = read_labels(cfg, ck.tensors["classifier.weight"].shape[0])
    finally:
        w.close()
    return ck


def summarize_ignored(keys: Iterable[str], limit: int = 6) -> str:
    """`predictions.* (5), albert.embeddings.position_ids` style summary of unused keys."""
    keys = list(keys)
    groups: "OrderedDict[str, int]" = OrderedDict()
    for k in keys:
        head = next((p for p in IGNORED_PREFIXES if k.startswith(p)), None)
        g = head + "*" if head else k
        groups[g] = groups.get(g, 0) + 1
    parts = ["%s (%d)" % (g, n) if n > 1 else g for g, n in groups.items()]
    if len(parts) > limit:
        parts = parts[:limit] + ["... %d more" % (len(parts) - limit)]
    return ", ".join(parts)
