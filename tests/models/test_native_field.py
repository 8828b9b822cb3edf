#!/usr/bin/env python3
"""The `native_field` declaration (docs/MODEL_CONTRACT.md, "Native fields"): every exported family
and the ALBERT importer's module declare their block, and `python3 -m odeserve_models
declare-native-field` adds the pre-LN declaration to an export made without it (outputs
unchanged, ShareBERT's prepared matrices stored empty again) and refuses a module whose field is
another block.

  PYTHONPATH=models /usr/bin/python3 -m unittest discover -s tests/models -p 'test_native_field.py'
"""
import contextlib
import io
import os
import tempfile
import unittest

import torch

from odeserve_models import families
from odeserve_models.export import save_torchscript
from odeserve_models.exporting import declare_native_field
from odeserve_models.translation import SharedTranslator
from odeserve_models.albert.importer import import_albert
from odeserve_models.albert.synthetic import write_synthetic_checkpoint


def tiny(family: str):
    torch.manual_seed(3)
    kw = dict(hash_dim=16) if family == "eelbert" else dict(vocab=60, emb=8)
    return families.build(family, hidden=16, heads=2, ffn=32, trained_depth=3, max_len=12, out_dim=16, **kw).eval()


def inputs(model):
    torch.manual_seed(5)
    mask = torch.ones(2, 9)
    mask[1, 5:] = 0.0
    if isinstance(model, families.EelbertEncoder):
        return torch.rand(2, 9, 16), mask
    return torch.randint(5, 60, (2, 9)), mask


class NativeFieldDeclaration(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="odeserve-native-")

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_every_family_declares_the_pre_ln_block(self):
        for family in ("albert", "sharebert", "eelbert"):
            save_torchscript(tiny(family), self.path(family + ".pt"))
            self.assertEqual(torch.jit.load(self.path(family + ".pt")).native_field, "pre_ln", family)

    def test_an_older_export_gets_the_declaration_and_keeps_its_outputs(self):
        for family in ("sharebert", "eelbert"):
            model = tiny(family)
            del model.native_field  # as exported before families declared it
            old = self.path(family + "-old.pt")
            save_torchscript(model, old)
            self.assertFalse(hasattr(torch.jit.load(old), "native_field"))
            new = self.path(family + "-new.pt")
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(declare_native_field.main([old, "--out", new]), 0)
            before, after = torch.jit.load(old), torch.jit.load(new)
            self.assertEqual(after.native_field, "pre_ln")
            if family == "sharebert":
                self.assertEqual(after.w_qkv.numel(), 0, "prepared matrices are stored empty, as exported")
            x, mask = inputs(model)
            before.prepare()
            after.prepare()
            self.assertTrue(torch.equal(before.forward(x, mask), after.forward(x, mask)), family)

    def test_a_module_with_another_field_is_refused_and_left_alone(self):
        # A module with the block's tensors whose vector_field is something else.
        other = tiny("albert")
        del other.native_field

        class Doubled(families.AlbertEncoder):
            @torch.jit.export
            def vector_field(self, h, mask):
                return 2.0 * families.block_field(h, families.mask_bias(mask), self.num_heads, self.scale,
                                                  self.ln1_w, self.ln1_b, self.w_qkv, self.b_qkv, self.w_o,
                                                  self.b_o, self.ln2_w, self.ln2_b, self.w_1, self.b_1,
                                                  self.w_2, self.b_2)

        doubled = Doubled(vocab=60, emb=8, hidden=16, heads=2, ffn=32, trained_depth=3, max_len=12, out_dim=16)
        doubled.load_state_dict(other.state_dict())
        del doubled.native_field
        path = self.path("doubled.pt")
        save_torchscript(doubled.eval(), path)
        size = os.path.getsize(path)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(declare_native_field.main([path]), 1)
        self.assertIn("differ from the declared ones", err.getvalue())
        self.assertEqual(os.path.getsize(path), size)
        self.assertFalse(hasattr(torch.jit.load(path), "native_field"))

    def test_an_older_translator_gets_its_encoder_and_decoder_declared(self):
        torch.manual_seed(4)
        model = SharedTranslator(vocab=40, hidden=16, heads=2, ffn=32, encoder_depth=2, decoder_depth=3, max_len=12).eval()
        self.assertEqual((model.native_field, model.native_field_prefix, model.native_decoder), ("pre_ln", "e_", "pre_ln_cross"))
        for name in ("native_field", "native_field_prefix", "native_decoder"):
            delattr(model, name)
        old, new = self.path("translator-old.pt"), self.path("translator-new.pt")
        torch.jit.save(torch.jit.script(model), old)
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(declare_native_field.main([old, "--out", new]), 0)
        before, after = torch.jit.load(old), torch.jit.load(new)
        self.assertEqual((after.native_field, after.native_field_prefix, after.native_decoder), ("pre_ln", "e_", "pre_ln_cross"))
        memory, mask = torch.randn(2, 6, 16), torch.ones(2, 6)
        g, cache = torch.randn(2, 1, 16), torch.randn(2, 2, 1, 8)
        for x, y in zip(before.decoder_field(g, cache, cache, *before.cross_kv(memory, mask)),
                        after.decoder_field(g, cache, cache, *after.cross_kv(memory, mask))):
            self.assertTrue(torch.equal(x, y))

    def test_the_albert_importer_declares_the_post_ln_block(self):
        write_synthetic_checkpoint(self.path("ckpt"), format="safetensors", task="embedding")
        with contextlib.redirect_stdout(io.StringIO()):
            import_albert(self.path("ckpt"), self.path("imported"), "embedding")
        module = torch.jit.load(os.path.join(self.path("imported"), "model.pt"))
        self.assertEqual(module.native_field, "albert_post_ln")


if __name__ == "__main__":
    unittest.main()
