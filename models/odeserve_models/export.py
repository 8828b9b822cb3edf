"""Write a model folder per docs/MODEL_CONTRACT.md: model.pt, config.pbtxt, tokenizer.model,
quality.pbtxt."""
import os
import shutil
from typing import Dict, List, Optional, Sequence

import torch

from .families import SharedEncoderBase, ShareBertEncoder, count_parameters


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def config_text(name: str, model: SharedEncoderBase, task: str, description: str,
                max_len: int, steps=(1, 8, 4), solvers=("EULER", "HEUN", "RK4"),
                labels: Sequence[str] = (), languages: Sequence[str] = (),
                hash_cfg: Optional[Dict] = None, batching: Optional[Dict] = None,
                max_inputs_per_request: int = 64, version: str = "1",
                translation: Optional[Dict] = None, compute_precision: str = "FLOAT32",
                quality_tolerance: float = 0.0) -> str:
    """translation (task TRANSLATION): dict with decoder_trained_depth, decoder_steps (min, max,
    default), max_output_tokens, source_language, target_language, expected_output_ratio,
    max_beam_size, optional length_penalty (beam ranking exponent). compute_precision: FLOAT32 or BFLOAT16 (the server's autocast option).
    quality_tolerance: budgeted step choice takes the cheapest point within this of the best (0: the best)."""
    assert compute_precision in ("FLOAT32", "BFLOAT16"), compute_precision
    b = batching or dict(max_batch_size=32, max_batch_tokens=4096, max_queue_delay_us=500,
                         max_queue_size=512)
    L = []
    L.append("name: %s" % _q(name))
    L.append("task: %s" % task)
    L.append("version: %s" % _q(version))
    L.append("family: %s" % _q(model.family))
    L.append("description: %s" % _q(description))
    L.append('torchscript_file: "model.pt"')
    L.append("tokenizer {")
    L.append('  model_file: "tokenizer.model"')
    L.append("  input_kind: %s" % ("HASHED_NGRAMS" if hash_cfg else "TOKEN_IDS"))
    if hash_cfg:
        L.append("  hash {")
        L.append("    dim: %d" % hash_cfg["dim"])
        L.append("    seed: %d" % hash_cfg["seed"])
        for o in hash_cfg["orders"]:
            L.append("    ngram_orders: %d" % o)
        L.append("  }")
    L.append("  add_bos: true")
    L.append("  add_eos: true")
    L.append("}")
    L.append("max_sequence_length: %d" % max_len)
    L.append("trained_depth: %d" % model.trained_depth)
    L.append("steps { min: %d max: %d default_steps: %d }" % tuple(steps))
    for s in solvers:
        L.append("solvers: %s" % s)
    for lab in labels:
        L.append("labels: %s" % _q(lab))
    for lang in languages:
        L.append("languages: %s" % _q(lang))
    if task != "TRANSLATION":
        L.append("embedding_dimension: %d" % (model.out_dim if task == "EMBEDDING" else model.hidden_size))
    L.append("hidden_size: %d" % model.hidden_size)
    if task != "TRANSLATION":
        L.append("pooling: MEAN")
    L.append("batching {")
    for k in ("max_batch_size", "max_batch_tokens", "max_queue_delay_us", "max_queue_size"):
        L.append("  %s: %d" % (k, b[k]))
    L.append("}")
    L.append("max_inputs_per_request: %d" % max_inputs_per_request)
    L.append('quality_profile_file: "quality.pbtxt"')
    if translation:
        t = translation
        L.append("translation {")
        L.append("  decoder_trained_depth: %d" % t["decoder_trained_depth"])
        L.append("  decoder_steps { min: %d max: %d default_steps: %d }" % tuple(t["decoder_steps"]))
        L.append("  max_output_tokens: %d" % t["max_output_tokens"])
        L.append("  source_language: %s" % _q(t["source_language"]))
        L.append("  target_language: %s" % _q(t["target_language"]))
        L.append("  expected_output_ratio: %.4f" % t["expected_output_ratio"])
        L.append("  max_beam_size: %d" % t["max_beam_size"])
        if t.get("length_penalty", 1.0) != 1.0:
            L.append("  length_penalty: %g" % t["length_penalty"])
        L.append("}")
    L.append("parameters: %d" % count_parameters(model))
    if compute_precision != "FLOAT32":
        L.append("compute_precision: %s" % compute_precision)
    if quality_tolerance:
        L.append("quality_tolerance: %g" % quality_tolerance)
    return "\n".join(L) + "\n"


def unresolvable_gap(items: int, alpha: float = 0.05) -> float:
    """The largest difference of two quality-profile points, as a fraction of the `items` both
    were measured on, that an exact two-sided McNemar test at `alpha` can never call significant,
    however the items split: with d items right for one point and wrong for the other and none
    the other way round (the most telling split), p = 2 * 0.5**d. 5/600 at 600 items: a budgeted
    call's step choice should not pay for differences the profile cannot resolve
    (config quality_tolerance)."""
    d = 0
    while 2 * 0.5 ** (d + 1) >= alpha:
        d += 1
    return d / items


def quality_text(primary_metric: str, points: List[Dict]) -> str:
    """points: dicts with solver, steps, metric, value, dataset."""
    L = ["primary_metric: %s" % _q(primary_metric)]
    for p in points:
        extra = ""
        if p.get("decoder_steps"):
            extra = " decoder_steps: %d beam_size: %d" % (p["decoder_steps"], p.get("beam_size", 1))
        L.append("points { solver: %s steps: %d metric: %s value: %.6f dataset: %s%s }" % (
            p["solver"], p["steps"], _q(p["metric"]), p["value"], _q(p["dataset"]), extra))
    return "\n".join(L) + "\n"


def save_torchscript(model: SharedEncoderBase, path: str) -> None:
    model = model.eval()
    encoder = getattr(model, "encoder", model)  # a LexicalClassifier wraps its encoder
    if isinstance(encoder, ShareBertEncoder):
        encoder.clear_prepared()  # the sliced matrices are materialized by prepare() at load
    for p in model.parameters():
        p.requires_grad_(False)
    scripted = torch.jit.script(model)
    torch.jit.save(scripted, path)


def export_model(out_dir: str, name: str, model: SharedEncoderBase, tokenizer_file: str,
                 config: str, quality: str) -> str:
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    save_torchscript(model, os.path.join(d, "model.pt"))
    shutil.copyfile(tokenizer_file, os.path.join(d, "tokenizer.model"))
    with open(os.path.join(d, "config.pbtxt"), "w", encoding="utf-8") as f:
        f.write(config)
    with open(os.path.join(d, "quality.pbtxt"), "w", encoding="utf-8") as f:
        f.write(quality)
    return d


def validate_text_protos(model_dir: str, proto_root: str) -> bool:
    """Parse config.pbtxt / quality.pbtxt with protoc-generated Python classes, if available.
    Returns False (and does nothing) when protoc or python3-protobuf is missing."""
    import subprocess, tempfile
    from .protos import forget, import_generated
    try:
        from google.protobuf import text_format
    except ImportError:
        return False
    if shutil.which("protoc") is None:
        return False
    tmp = tempfile.mkdtemp(prefix="odeserve-pb-")
    try:
        subprocess.check_call(["protoc", "-I", proto_root, "--python_out", tmp,
                               "odeserve/v1/model_config.proto", "odeserve/v1/inference.proto"])
        mc, = import_generated(tmp, ["model_config_pb2"])
        with open(os.path.join(model_dir, "config.pbtxt"), encoding="utf-8") as f:
            cfg = text_format.Parse(f.read(), mc.ModelConfig())
        with open(os.path.join(model_dir, "quality.pbtxt"), encoding="utf-8") as f:
            text_format.Parse(f.read(), mc.QualityProfile())
        assert cfg.name == os.path.basename(model_dir.rstrip("/"))
        return True
    finally:
        forget()
        shutil.rmtree(tmp, ignore_errors=True)
