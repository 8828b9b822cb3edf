"""`python3 -m odeserve_models export-onnx MODEL_DIR OUT.onnx [--steps N] [--solver euler]`:
a model folder's encoder at a fixed step count as one ONNX graph, for the ONNX Runtime side of
the runtime benchmark (tests/bench/side_by_side.py) and its parity test
(tests/bench/test_onnx_export.py).

The graph is the server's computation for one (solver, steps): `input_stage`, then `steps`
solver steps of `dt = L / steps` of `vector_field` (odeserve_models.solvers, unrolled: no ONNX
Loop), then `output_stage`, all float32. Inputs: `ids` int64 [B, T] (TOKEN_IDS) or `features`
float32 [B, T, hash.dim] (HASHED_NGRAMS), and `mask` float32 [B, T] (1 = token, 0 = pad);
output `embedding` [B, D] (EMBEDDING) or `logits` [B, labels] (CLASSIFICATION). B and T are
dynamic axes.

How: model.pt is a TorchScript module, and the tracer cannot follow calls into a loaded script
module's methods. So the module is rebuilt as the eager Python module it was scripted from
(the class named by its TorchScript type, e.g. odeserve_models.families.ShareBertEncoder, with
its parameters, buffers and attributes copied), `prepare()` is called (ShareBERT materializes
its sliced matrices), and the solver loop is traced in eager mode. The rebuilt module is checked
against the TorchScript module at the requested steps before export (the Python source must
still compute what was saved), and, where the `onnxruntime` Python package exists, the ONNX file
against both; without it (Debian has none) the ONNX check runs in Node: tests/bench/ort/run.js.
Translation models are refused (their decoder is a search, not one graph).

Token counts: a trace freezes every Python branch as taken at the traced shape. Before
exporting, a TorchScript trace of the same call (the same frozen branches) is run against the
eager module at every token count 1..--max_tokens (default max_sequence_length); export stops,
naming the wrong counts, where they differ. The bundled models with one graph for every count:
embed-sharebert, embed-eelbert, imported ALBERTs. classify-sections (EmbeddingProbeClassifier)
reads its embedder's 64-token window through such branches: export it with --max_tokens 64.
"""
import argparse
import contextlib
import importlib
import json
import os
import re
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from . import solvers

SOLVERS = {"euler": "EULER", "heun": "HEUN", "rk4": "RK4"}


def read_config(model_dir):
    """The config.pbtxt fields this tool needs, read by pattern (no generated proto classes)."""
    with open(os.path.join(model_dir, "config.pbtxt"), encoding="utf-8") as f:
        text = f.read()

    def field(name, default=None, cast=str):
        m = re.search(r"^\s*%s\s*:\s*\"?([^\"\n]*)\"?\s*$" % name, text, re.MULTILINE)
        return cast(m.group(1).strip()) if m else default

    hash_block = re.search(r"hash\s*\{([^}]*)\}", text)
    hash_dim = 0
    if hash_block:
        m = re.search(r"\bdim\s*:\s*(\d+)", hash_block.group(1))
        hash_dim = int(m.group(1)) if m else 0
    return {
        "name": field("name", os.path.basename(os.path.normpath(model_dir))),
        "task": field("task", "EMBEDDING"),
        "input_kind": field("input_kind", "TOKEN_IDS"),
        "torchscript_file": field("torchscript_file", "model.pt"),
        "tokenizer_file": field("model_file", "tokenizer.model"),
        "trained_depth": field("trained_depth", 0, int),
        "max_sequence_length": field("max_sequence_length", 0, int),
        "hash_dim": hash_dim,
    }


# ---- TorchScript module -> the eager module it was scripted from ------------------------------

_SKIPPED_ATTRIBUTES = {"training", "_is_full_backward_hook"}


def _python_class(qualified_name):
    """`__torch__.odeserve_models.families.___torch_mangle_2.AlbertEncoder` -> the class."""
    parts = [p for p in qualified_name.split(".") if p != "__torch__" and not p.startswith("___torch_mangle_")]
    module = importlib.import_module(".".join(parts[:-1]))
    return getattr(module, parts[-1])


def unscript(c):
    """An eager nn.Module equal to the C++ script module `c` (torch._C.ScriptModule): an
    instance of its Python class made without __init__, holding copies of its parameters,
    buffers, plain attributes and (recursively) submodules."""
    cls = _python_class(c._type().qualified_name())
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError("%s is not an nn.Module class" % c._type().qualified_name())
    obj = cls.__new__(cls)
    nn.Module.__init__(obj)
    it = torch._C._jit_debug_module_iterators(c)
    params = {name for name, _ in it["named_parameters"]}
    buffers = {name for name, _ in it["named_buffers"]}
    for name, value in it["named_attributes"]:
        if name in _SKIPPED_ATTRIBUTES:
            continue
        if isinstance(value, torch._C.ScriptModule):
            obj.add_module(name, unscript(value))
        elif name in params:
            obj.register_parameter(name, nn.Parameter(value.detach().clone(), requires_grad=False))
        elif name in buffers:
            obj.register_buffer(name, value.detach().clone())
        else:
            setattr(obj, name, value)
    obj.train(False)
    return obj


class Unrolled(nn.Module):
    """input_stage -> `steps` solver steps (dt = L / steps) -> output_stage; traced, the Python
    loop of odeserve_models.solvers unrolls."""

    def __init__(self, model, steps, solver):
        super().__init__()
        self.model, self.steps, self.solver = model, steps, solver

    def forward(self, x, mask):
        return solvers.run(self.model, x, mask, self.steps, self.solver)


@contextlib.contextmanager
def static_layer_norm_shapes():
    """The modules pass layer_norm a normalized shape read from a tensor's size (`[H]` with
    `H = h.size(2)`), which the tracer records as a computed value and the ONNX exporter refuses
    (it must be constant). The hidden size is no dynamic axis, so while tracing, layer_norm takes
    it as a plain int."""
    original = F.layer_norm

    def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
        return original(x, [int(s) for s in normalized_shape], weight, bias, eps)

    F.layer_norm = layer_norm
    try:
        yield
    finally:
        F.layer_norm = original


def example_inputs(cfg, model, batch=3, length=0, seed=0):
    """Random valid inputs: rows of different lengths (trailing pads), ids in the vocabulary
    (SentencePiece's piece count where python3-sentencepiece can read the tokenizer, else 100),
    or hashed features in [-1, 1] (zeros at pads)."""
    g = torch.Generator().manual_seed(seed)
    T = length or max(2, min(16, cfg["max_sequence_length"] or 16))
    lengths = [T] + [max(1, T - 3 * i - 1) for i in range(1, batch)]
    mask = torch.zeros(batch, T)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1.0
    if cfg["input_kind"] == "HASHED_NGRAMS":
        x = (torch.rand(batch, T, cfg["hash_dim"], generator=g) * 2 - 1) * mask.unsqueeze(-1)
        return x, mask
    x = torch.randint(4, vocab_size(cfg, model), (batch, T), generator=g) * mask.long()
    return x, mask


def vocab_size(cfg, model=None):
    path = os.path.join(cfg["model_dir"], cfg["tokenizer_file"]) if "model_dir" in cfg else ""
    try:
        import sentencepiece as spm
        return spm.SentencePieceProcessor(model_file=path).get_piece_size()
    except Exception:  # no sentencepiece or no tokenizer: a range every bundled model has
        return 100


def max_abs_diff(a, b):
    return float((a.detach().float() - b.detach().float()).abs().max())


def export(model_dir, out, steps=0, solver="euler", opset=17, max_tokens=0, trace_tokens=0, check_tolerance=1e-5):
    """Exports MODEL_DIR's encoder at (solver, steps) to `out`, a graph right for every token
    count up to max_tokens (default max_sequence_length); returns a summary dict."""
    with torch.no_grad():
        return _export(model_dir, out, steps, solver, opset, max_tokens, trace_tokens, check_tolerance)


def _export(model_dir, out, steps, solver, opset, max_tokens, trace_tokens, check_tolerance):
    cfg = read_config(model_dir)
    cfg["model_dir"] = model_dir
    if cfg["task"] == "TRANSLATION":
        raise ValueError("%s is a TRANSLATION model: only encoders (EMBEDDING, CLASSIFICATION) export" % model_dir)
    if solver.lower() not in SOLVERS:
        raise ValueError("unknown solver %r (euler, heun, rk4)" % solver)
    solver_name = SOLVERS[solver.lower()]
    scripted = torch.jit.load(os.path.join(model_dir, cfg["torchscript_file"]), map_location="cpu")
    scripted.eval()
    scripted.prepare()
    depth = int(scripted.trained_depth)
    steps = steps or depth
    try:
        eager = unscript(scripted._c)
    except Exception as e:
        raise RuntimeError("cannot rebuild %s's eager module (%s): export needs the Python class "
                           "its TorchScript type names" % (model_dir, e))
    eager.prepare()
    wrapper = Unrolled(eager, steps, solver_name).eval()

    # The eager rebuild must compute what the TorchScript module computes, at these steps.
    x, mask = example_inputs(cfg, scripted, batch=3, length=0, seed=1)
    want = solvers.run(scripted, x, mask, steps, solver_name)
    got = wrapper(x, mask)
    diff = max_abs_diff(want, got)
    if not diff <= check_tolerance:
        raise RuntimeError("the eager rebuild differs from model.pt by %.3g (> %g): the Python "
                           "source no longer matches the saved module" % (diff, check_tolerance))

    input_name = "features" if cfg["input_kind"] == "HASHED_NGRAMS" else "ids"
    output_name = "logits" if cfg["task"] == "CLASSIFICATION" else "embedding"
    longest = cfg["max_sequence_length"] or 64
    max_tokens = max_tokens or longest
    trace_tokens = trace_tokens or min(16, max_tokens)
    x, mask = example_inputs(cfg, scripted, batch=2, length=trace_tokens, seed=2)

    # The ONNX graph is the trace: a branch of the Python code on the token count (such as
    # EmbeddingProbeClassifier's embedder window) is frozen as taken at `trace_tokens`. A
    # TorchScript trace of the same call holds the same frozen branches, so running it at every
    # token count up to max_tokens shows where the exported graph would be wrong. Every solver
    # step runs the same code, so that sweep traces one step; the full trace is checked at the
    # shortest and longest counts.
    with warnings.catch_warnings(), static_layer_norm_shapes():
        warnings.simplefilter("ignore")  # tracer warnings about Python ints from sizes
        # functions, not the modules: tracing a module would also script its exported methods
        one_step = Unrolled(eager, 1, solver_name).eval()
        traced_one = torch.jit.trace(lambda ids, m: one_step(ids, m), (x, mask), check_trace=False)
        traced = torch.jit.trace(lambda ids, m: wrapper(ids, m), (x, mask), check_trace=False)
    wrong = tokens_where_trace_differs(traced_one, one_step, cfg, scripted, range(1, max_tokens + 1), check_tolerance)
    wrong += tokens_where_trace_differs(traced, wrapper, cfg, scripted, sorted({1, max_tokens}), check_tolerance)
    wrong = sorted(set(wrong))
    if wrong:
        raise RuntimeError(
            "traced at %d tokens, the graph is wrong at token counts %s of 1..%d (the module branches "
            "on the token count in Python, e.g. EmbeddingProbeClassifier's embedder window): export a "
            "range one trace covers, --max_tokens N (traced at min(16, N)) and/or --trace_tokens T"
            % (trace_tokens, ranges(wrong), max_tokens))

    dynamic = {input_name: {0: "batch", 1: "tokens"}, "mask": {0: "batch", 1: "tokens"}, output_name: {0: "batch"}}
    t0 = time.time()
    with warnings.catch_warnings(), static_layer_norm_shapes():
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapper, (x, mask), out, input_names=[input_name, "mask"], output_names=[output_name],
                          dynamic_axes=dynamic, opset_version=opset, do_constant_folding=True)
    summary = {"model_dir": os.path.abspath(model_dir), "onnx": os.path.abspath(out), "name": cfg["name"],
               "task": cfg["task"], "input": input_name, "input_kind": cfg["input_kind"],
               "hash_dim": cfg["hash_dim"], "output": output_name, "trained_depth": depth, "steps": steps,
               "solver": solver_name, "dt": depth / steps, "opset": opset, "trace_tokens": trace_tokens,
               "max_tokens": max_tokens, "max_sequence_length": cfg["max_sequence_length"],
               "eager_vs_torchscript_max_abs_diff": diff, "bytes": os.path.getsize(out),
               "export_seconds": round(time.time() - t0, 2)}
    summary["onnx_check"] = check_with_python_ort(out, scripted, cfg, steps, solver_name, input_name, max_tokens)
    return summary


def tokens_where_trace_differs(traced, wrapper, cfg, scripted, token_counts, tolerance):
    """The token counts where the trace and the eager module disagree (or the trace fails), on
    2 rows (the second one shorter, padded)."""
    wrong = []
    for T in token_counts:
        x, mask = example_inputs(cfg, scripted, batch=2, length=T, seed=100 + T)
        want = wrapper(x, mask)
        try:
            got = traced(x, mask)
            bad = got.shape != want.shape or not max_abs_diff(want, got) <= tolerance * max(1.0, float(want.abs().max()))
        except RuntimeError:
            bad = True
        if bad:
            wrong.append(T)
    return wrong


def ranges(values):
    """[1, 2, 3, 7] -> "1-3, 7"."""
    out, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(str(start) if start == v else "%d-%d" % (start, v))
            start = None
    return ", ".join(out)


def check_with_python_ort(path, scripted, cfg, steps, solver_name, input_name, max_tokens):
    """max |ONNX - TorchScript| on inputs of another shape than the trace's, if the onnxruntime
    Python package is installed; else a note pointing at the Node check."""
    try:
        import onnxruntime as ort
    except ImportError:
        return "skipped: no onnxruntime Python package; check in Node: tests/bench/test_onnx_export.py"
    x, mask = example_inputs(cfg, scripted, batch=4, length=max(3, min(23, max_tokens)), seed=3)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {input_name: x.numpy(), "mask": mask.numpy()})
    want = solvers.run(scripted, x, mask, steps, solver_name)
    return {"max_abs_diff": max_abs_diff(want, torch.from_numpy(got)), "shape": list(x.shape[:2])}


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m odeserve_models export-onnx",
                                 description="Export a model folder's encoder at a fixed step count to ONNX "
                                             "(input_stage, unrolled solver steps of dt = L/steps, output_stage).")
    ap.add_argument("model_dir", help="an odeserve model folder (config.pbtxt, model.pt)")
    ap.add_argument("out", help="the .onnx file to write")
    ap.add_argument("--steps", type=int, default=0, help="solver steps (default: the trained depth L)")
    ap.add_argument("--solver", default="euler", choices=sorted(SOLVERS), help="default euler")
    ap.add_argument("--opset", type=int, default=17, help="ONNX opset (17: LayerNormalization as one node)")
    ap.add_argument("--max_tokens", type=int, default=0,
                    help="the graph must be right for every token count up to this (default: max_sequence_length); "
                         "checked on the trace")
    ap.add_argument("--trace_tokens", type=int, default=0, help="token count to trace at (default: min(16, max_tokens))")
    ap.add_argument("--summary", default="", help="also write the printed summary JSON to this file")
    args = ap.parse_args(argv)
    if args.steps < 0:
        ap.error("--steps must be >= 1 (0 = the trained depth)")
    if args.max_tokens < 0 or args.trace_tokens < 0:
        ap.error("--max_tokens and --trace_tokens must be >= 1")
    try:
        summary = export(args.model_dir, args.out, args.steps, args.solver, args.opset, args.max_tokens,
                         args.trace_tokens)
    except (ValueError, RuntimeError, OSError) as e:
        sys.stderr.write("export-onnx: %s\n" % e)
        return 1
    text = json.dumps(summary, sort_keys=True)
    print(text)
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(text + "\n")
    return 0
