"""Declare the pre-LN native field on a model.pt exported before models declared it.

The server evaluates a module's shared block natively, instead of through the TorchScript
interpreter, when the module carries the string attribute `native_field` (docs/MODEL_CONTRACT.md,
"Native fields"). Modules exported by this package now declare it; this command adds it to an
older export of the same families (families.SharedEncoderBase) after checking, on random states
with padding, that the module's vector_field is exactly families.block_field over its own tensors:

  /usr/bin/python3 -m odeserve_models declare-native-field ../models/repository/embed-sharebert/model.pt

The file is rewritten in place (or to --out); every method, parameter and buffer is kept as it
was, so outputs do not change. A module whose field is not that block is refused and left alone.
"""
import argparse
import sys

import torch

from odeserve_models.families import block_field, mask_bias

TENSORS = ("ln1_w", "ln1_b", "w_qkv", "b_qkv", "w_o", "b_o", "ln2_w", "ln2_b", "w_1", "b_1", "w_2", "b_2")


def block_difference(module) -> float:
    """Largest |vector_field - block_field| over token positions of two random probe batches."""
    missing = [n for n in TENSORS + ("num_heads", "scale") if not hasattr(module, n)]
    if missing:
        raise ValueError("the module lacks %s: not a families.SharedEncoderBase export" % ", ".join(missing))
    if hasattr(module, "prepare"):
        module.prepare()
    width = module.ln1_w.shape[0]
    g = torch.Generator().manual_seed(1207)
    worst = 0.0
    with torch.no_grad():
        for batch, length in ((2, 5), (3, 17)):
            h = torch.randn(batch, length, width, generator=g)
            mask = torch.ones(batch, length)
            mask[-1, length // 2:] = 0.0
            got = module.vector_field(h, mask)
            want = block_field(h, mask_bias(mask), int(module.num_heads), float(module.scale),
                               *[getattr(module, n) for n in TENSORS])
            worst = max(worst, float(((got - want) * mask.unsqueeze(-1)).abs().max()))
    return worst


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a TorchScript model.pt of families.py's encoders")
    ap.add_argument("--out", default="", help="write here instead of rewriting MODEL")
    a = ap.parse_args(argv)
    module = torch.jit.load(a.model)
    if hasattr(module, "native_field"):
        print("%s already declares native_field '%s'" % (a.model, module.native_field))
        return 0
    try:
        difference = block_difference(module)
    except (ValueError, RuntimeError) as e:
        print("%s: %s" % (a.model, e), file=sys.stderr)
        return 1
    if difference > 1e-6:
        print("%s: vector_field differs from the pre-LN block by %.3g: not declared" % (a.model, difference),
              file=sys.stderr)
        return 1
    if module._c._has_method("prepare") and hasattr(module, "w_qkv") and "w_qkv" in dict(module.named_buffers()):
        # ShareBERT: prepare() materialized the sliced matrices; the stored model keeps them empty.
        for name in ("w_qkv", "w_o", "w_1", "w_2"):
            setattr(module, name, torch.zeros(0))
    module._c._register_attribute("native_field", torch._C.StringType.get(), "pre_ln")
    out = a.out or a.model
    torch.jit.save(module, out)
    print("%s: declared native_field 'pre_ln' (vector_field equals the block to %.1g)" % (out, difference))
    return 0


if __name__ == "__main__":
    sys.exit(main())
