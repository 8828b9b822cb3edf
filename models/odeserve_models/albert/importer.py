"""A validated Hugging Face ALBERT checkpoint -> an odeserve model folder:

    OUT/model.pt         torch.jit.script of module.AlbertOdeModule, saved with torch.jit.save
    OUT/tokenizer.model  spiece.model, copied
    OUT/config.pbtxt     odeserve.v1.ModelConfig (text proto); no quality profile: the server then
                         serves trained_depth steps by default, until `profile` measures one

Everything is checked before anything is written; a refusal is a CheckpointError whose message
names the key or field at fault.
"""
import os
import shutil
import tempfile
from typing import List, Optional

import torch

from .checkpoint import CheckpointError, Checkpoint, load_checkpoint, summarize_ignored
from .module import AlbertOdeModule, count_parameters

TASKS = {"embedding": "EMBEDDING", "classification": "CLASSIFICATION"}
POOLING_ENUM = {"mean": "MEAN", "cls": "FIRST", "pooler": "POOLER"}
PRECISIONS = {"float32": "FLOAT32", "bfloat16": "BFLOAT16"}
DEFAULT_POOLING = {"embedding": "mean", "classification": "pooler"}
BATCHING = dict(max_batch_size=32, max_batch_tokens=8192, max_queue_delay_us=2000, max_queue_size=512)
MAX_INPUTS_PER_REQUEST = 64
SERVER_MAX_SEQUENCE_LENGTH = 8192  # server/repository/model_config.cc kMaxSequenceLengthLimit
SERVER_MAX_STEPS = 1024            # kMaxStepsLimit
OUTPUT_FILES = ("model.pt", "tokenizer.model", "config.pbtxt")


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _b(v: bool) -> str:
    return "true" if v else "false"


def resolve_options(out_dir: str, task: str, pooling: Optional[str], name: Optional[str],
                    precision: str) -> dict:
    if task not in TASKS:
        raise CheckpointError("--task must be one of %s, not '%s'" % (", ".join(TASKS), task))
    pooling = pooling or DEFAULT_POOLING[task]
    if pooling not in POOLING_ENUM:
        raise CheckpointError("--pooling must be one of %s, not '%s'" % (", ".join(POOLING_ENUM), pooling))
    if task == "classification" and pooling != "pooler":
        raise CheckpointError("--pooling %s: --task classification runs the checkpoint's own head "
                              "(AlbertForSequenceClassification: pooler, then classifier), so its pooling "
                              "is pooler" % pooling)
    if precision not in PRECISIONS:
        raise CheckpointError("--precision must be one of %s, not '%s'" % (", ".join(PRECISIONS), precision))
    folder = os.path.basename(os.path.normpath(os.path.abspath(out_dir)))
    if name is not None and name != folder:
        raise CheckpointError("--name '%s' differs from the output folder's name '%s'; the server requires "
                              "config.pbtxt's name to equal the folder name (write to .../%s instead)"
                              % (name, folder, name))
    name = folder
    if not name or name.startswith("."):
        raise CheckpointError("output folder name '%s': the server skips hidden folders" % name)
    return dict(task=task, pooling=pooling, name=name, precision=precision)


def describe(ck: Checkpoint, pooling: str, task: str) -> str:
    c = ck.config
    arch = ",".join(c.get("architectures") or []) or "architectures not recorded"
    src = os.path.basename(os.path.normpath(os.path.abspath(ck.folder)))
    origin = c.get("_name_or_path") or ""
    text = ("ALBERT imported from Hugging Face checkpoint '%s'%s (%s, %s): E=%d H=%d heads=%d FFN=%d L=%d "
            "(one shared layer), %s, vocab %d; %s" % (
                src, " (%s)" % origin if origin and origin != src else "", arch, ck.weights_file,
                c["embedding_size"], c["hidden_size"], c["num_attention_heads"], c["intermediate_size"],
                c["num_hidden_layers"], c["hidden_act"], c["vocab_size"],
                "pooler + classifier head" if task == "classification" else "%s pooling" % pooling))
    return text


def config_text(ck: Checkpoint, opts: dict, parameters: int) -> str:
    c, t = ck.config, ck.tokenizer_options
    L_ = c["num_hidden_layers"]
    H = c["hidden_size"]
    max_len = min(c["max_position_embeddings"], SERVER_MAX_SEQUENCE_LENGTH)
    b = dict(BATCHING, max_batch_tokens=max(BATCHING["max_batch_tokens"], max_len))
    L = []
    L.append("name: %s" % _q(opts["name"]))
    L.append("task: %s" % TASKS[opts["task"]])
    L.append('version: "1"')
    L.append('family: "albert"')
    L.append("description: %s" % _q(describe(ck, opts["pooling"], opts["task"])))
    L.append('torchscript_file: "model.pt"')
    L.append("tokenizer {")
    L.append('  model_file: "tokenizer.model"')
    L.append("  input_kind: TOKEN_IDS")
    L.append("  add_bos: true")
    L.append("  add_eos: true")
    L.append("  bos_id: %d  # [CLS]" % ck.cls_id)
    L.append("  eos_id: %d  # [SEP]" % ck.sep_id)
    L.append("  normalization {  # Hugging Face AlbertTokenizer's preprocessing (tokenizer_config.json)")
    L.append("    collapse_whitespace: %s" % _b(t["remove_space"]))
    L.append("    normalize_quotes: true")
    L.append("    strip_accents: %s" % _b(not t["keep_accents"]))
    L.append("    lowercase: %s" % _b(t["do_lower_case"]))
    L.append("    split_digit_comma: true")
    L.append("  }")
    L.append("}")
    L.append("max_sequence_length: %d" % max_len)
    L.append("trained_depth: %d" % L_)
    L.append("steps { min: 1 max: %d }" % min(2 * L_, SERVER_MAX_STEPS))
    for s in ("EULER", "HEUN", "RK4"):
        L.append("solvers: %s" % s)
    for lab in ck.labels if opts["task"] == "classification" else []:
        L.append("labels: %s" % _q(lab))
    L.append("embedding_dimension: %d" % H)
    L.append("hidden_size: %d" % H)
    L.append("pooling: %s" % POOLING_ENUM[opts["pooling"]])
    L.append("batching {")
    for k in ("max_batch_size", "max_batch_tokens", "max_queue_delay_us", "max_queue_size"):
        L.append("  %s: %d" % (k, b[k]))
    L.append("}")
    L.append("max_inputs_per_request: %d" % MAX_INPUTS_PER_REQUEST)
    L.append("parameters: %d" % parameters)
    L.append("compute_precision: %s" % PRECISIONS[opts["precision"]])
    return "\n".join(L) + "\n"


def build_module(ck: Checkpoint, task: str, pooling: str) -> AlbertOdeModule:
    m = AlbertOdeModule(ck.tensors, ck.config, pooling=pooling, classify=(task == "classification"))
    return m.eval()


def check_output_dir(out_dir: str, force: bool) -> List[str]:
    """-> files already there (with --force; refused without it when the folder is not empty)."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise CheckpointError("%s: exists and is not a folder" % out_dir)
    present = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []
    if present and not force:
        raise CheckpointError("%s: not empty (%s); pass --force to overwrite"
                              % (out_dir, ", ".join(present[:5]) + (" ..." if len(present) > 5 else "")))
    return present


def import_albert(checkpoint_dir: str, out_dir: str, task: str, pooling: Optional[str] = None,
                  name: Optional[str] = None, precision: str = "float32", force: bool = False) -> dict:
    """Validate, then write OUT/{model.pt, tokenizer.model, config.pbtxt}. Returns a summary
    dict (checkpoint, module, options, config text, leftover files in OUT)."""
    opts = resolve_options(out_dir, task, pooling, name, precision)
    present = check_output_dir(out_dir, force)
    need = ["pooler"] if opts["pooling"] == "pooler" else []
    if task == "classification":
        need.append("classifier")
    ck = load_checkpoint(checkpoint_dir, need=need)
    if task == "classification":
        if len(ck.labels) < 2:
            raise CheckpointError("classifier.weight has %d row(s); a CLASSIFICATION model needs at least 2 labels"
                                  % len(ck.labels))
    if ck.config["max_position_embeddings"] < 3:
        raise CheckpointError("config.json: max_position_embeddings %d leaves no room for [CLS] x [SEP]"
                              % ck.config["max_position_embeddings"])
    module = build_module(ck, task, opts["pooling"])
    parameters = count_parameters(module)
    config = config_text(ck, opts, parameters)
    for p in module.parameters():
        p.requires_grad_(False)
    scripted = torch.jit.script(module)

    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".import-albert-", dir=out_dir)
    try:
        torch.jit.save(scripted, os.path.join(tmp, "model.pt"))
        shutil.copyfile(ck.spiece_path, os.path.join(tmp, "tokenizer.model"))
        with open(os.path.join(tmp, "config.pbtxt"), "w", encoding="utf-8") as f:
            f.write(config)
        for fn in OUTPUT_FILES:  # each file replaced whole (rename within the folder)
            os.replace(os.path.join(tmp, fn), os.path.join(out_dir, fn))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    leftovers = [f for f in present if f not in OUTPUT_FILES]
    return dict(checkpoint=ck, module=module, options=opts, config=config, parameters=parameters,
                leftovers=leftovers, ignored=summarize_ignored(ck.ignored_keys))
