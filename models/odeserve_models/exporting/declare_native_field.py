"""Declare the native blocks on a model.pt exported before models declared them.

The server evaluates a module's shared block natively, instead of through the TorchScript
interpreter, when the module declares it with string attributes (docs/MODEL_CONTRACT.md, "Native
fields"). Modules exported by this package now declare theirs; this command adds the declarations
to an older export of the same classes after checking, on random states with padding, that the
module computes exactly those blocks:

- an encoder of families.py (SharedEncoderBase): vector_field is families.block_field over its
  own tensors -> native_field = "pre_ln";
- a translator (translation.SharedTranslator): its encoder field is block_field over the e_*
  tensors, and decoder_field equals the current SharedTranslator's on the same weights ->
  native_field = "pre_ln", native_field_prefix = "e_", native_decoder = "pre_ln_cross".

  /usr/bin/python3 -m odeserve_models declare-native-field ../models/repository/embed-sharebert/model.pt

The file is rewritten in place (or to --out) from a fresh load of it, with only the attributes
added: every method, parameter and buffer is kept as it was, so outputs do not change. A module
whose field is another block is refused and left alone.
"""
import argparse
import sys

import torch

from odeserve_models.families import block_field, mask_bias
from odeserve_models.translation import SharedTranslator

TENSORS = ("ln1_w", "ln1_b", "w_qkv", "b_qkv", "w_o", "b_o", "ln2_w", "ln2_b", "w_1", "b_1", "w_2", "b_2")
TRANSLATOR_ARGS = ("vocab_size", "hidden_size", "num_heads", "ffn_size", "encoder_depth", "decoder_depth",
                   "max_len", "pad_id", "bos_id", "eos_id")


def _probes(width: int):
    g = torch.Generator().manual_seed(1207)
    for batch, length in ((2, 5), (3, 17)):
        h = torch.randn(batch, length, width, generator=g)
        mask = torch.ones(batch, length)
        mask[-1, length // 2:] = 0.0
        yield h, mask


def block_difference(module, prefix: str = "") -> float:
    """Largest |vector_field - block_field| over token positions of two random probe batches."""
    names = [prefix + n for n in TENSORS]
    missing = [n for n in names + ["num_heads", "scale"] if not hasattr(module, n)]
    if missing:
        raise ValueError("the module lacks %s: not an export of families.py or translation.py" % ", ".join(missing))
    if hasattr(module, "prepare"):
        module.prepare()
    worst = 0.0
    with torch.no_grad():
        for h, mask in _probes(getattr(module, names[0]).shape[0]):
            got = module.vector_field(h, mask)
            want = block_field(h, mask_bias(mask), int(module.num_heads), float(module.scale),
                               *[getattr(module, n) for n in names])
            worst = max(worst, float(((got - want) * mask.unsqueeze(-1)).abs().max()))
    return worst


def decoder_difference(module) -> float:
    """Largest |decoder_field - SharedTranslator.decoder_field| (field and caches) on the same
    weights, over probe positions with caches of 0 and 3 earlier positions."""
    reference = SharedTranslator(*[int(getattr(module, n)) for n in TRANSLATOR_ARGS]).eval()
    reference.load_state_dict({k: v for k, v in module.state_dict().items() if k != "projection_bf16"}, strict=False)
    H, heads = int(module.hidden_size), int(module.num_heads)
    g = torch.Generator().manual_seed(1208)
    worst = 0.0
    with torch.no_grad():
        for earlier in (0, 3):
            x = torch.randn(2, 1, H, generator=g)
            cache_k = torch.randn(2, heads, earlier, H // heads, generator=g)
            cache_v = torch.randn(2, heads, earlier, H // heads, generator=g)
            memory = torch.randn(2, 6, H, generator=g)
            mask = torch.ones(2, 6)
            mask[1, 4:] = 0.0
            cross = module.cross_kv(memory, mask)
            got = module.decoder_field(x, cache_k, cache_v, *cross)
            want = reference.decoder_field(x, cache_k, cache_v, *reference.cross_kv(memory, mask))
            worst = max(worst, max(float((a - b).abs().max()) for a, b in zip(got, want)))
    return worst


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a TorchScript model.pt of families.py's encoders or translation.py's translator")
    ap.add_argument("--out", default="", help="write here instead of rewriting MODEL")
    a = ap.parse_args(argv)
    checked = torch.jit.load(a.model)  # prepare() may fill buffers: check a copy, save a fresh one
    if hasattr(checked, "native_field"):
        print("%s already declares native_field '%s'" % (a.model, checked.native_field))
        return 0
    translator = hasattr(checked, "decoder_field") and hasattr(checked, "e_w_qkv")
    declarations = [("native_field", "pre_ln")]
    try:
        difference = block_difference(checked, "e_" if translator else "")
        if translator:
            difference = max(difference, decoder_difference(checked))
            declarations += [("native_field_prefix", "e_"), ("native_decoder", "pre_ln_cross")]
    except (ValueError, RuntimeError) as e:
        print("%s: %s" % (a.model, e), file=sys.stderr)
        return 1
    if difference > 1e-6:
        print("%s: the module's blocks differ from the declared ones by %.3g: not declared" % (a.model, difference),
              file=sys.stderr)
        return 1
    module = torch.jit.load(a.model)
    for name, value in declarations:
        module._c._register_attribute(name, torch._C.StringType.get(), value)
    out = a.out or a.model
    torch.jit.save(module, out)
    print("%s: declared %s (the blocks agree to %.1g)" % (
        out, ", ".join("%s '%s'" % d for d in declarations), difference))
    return 0


if __name__ == "__main__":
    sys.exit(main())
