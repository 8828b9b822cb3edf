#!/usr/bin/env python3
"""Fine-tuning helpers of models/train/train.py: starting from an exported classifier's or
embedding model's model.pt, extending the learned positions for longer inputs, and word dropout.

  /usr/bin/python3 -m unittest discover -s tests/models -p 'test_train_init.py'
"""
import importlib.util
import os
import pathlib
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "models"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from odeserve_models import families  # noqa: E402

_spec = importlib.util.spec_from_file_location("train", ROOT / "models" / "train" / "train.py")
train = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train)

SIZE = dict(vocab=50, emb=8, hidden=16, heads=2, ffn=32, trained_depth=2)
LABELS = 5


def sharebert(max_len, out_dim):
    torch.manual_seed(max_len * 100 + out_dim)
    return families.build("sharebert", max_len=max_len, out_dim=out_dim, **SIZE)


def classify(model, x, mask, n=2):
    with torch.no_grad():
        return model.output_stage(train.integrate(model, x, mask, n), mask)


class ExportedClassifierInit(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.exported = sharebert(max_len=8, out_dim=LABELS).eval()
        self.path = os.path.join(self.tmp.name, "model.pt")
        torch.jit.script(self.exported).save(self.path)

    def tearDown(self):
        self.tmp.cleanup()

    def load_into(self, max_len):
        model = sharebert(max_len=max_len, out_dim=SIZE["hidden"])
        cls = nn.Linear(SIZE["hidden"], LABELS)
        encoder, classifier = train.init_weights(self.path, model, cls)
        missing, unexpected = model.load_state_dict(encoder, strict=False)
        self.assertEqual(unexpected, [])
        self.assertTrue(all(k in families.PREPARED_MATRICES or k.startswith("head.") for k in missing), missing)
        cls.load_state_dict(classifier)
        model.head = cls  # as export_repository serves a classifier
        return model.eval()

    def test_longer_model_reproduces_the_exported_one_on_inputs_it_could_read(self):
        model = self.load_into(max_len=20)
        self.assertEqual(tuple(model.pos.shape), (20, SIZE["hidden"]))
        x = torch.randint(4, SIZE["vocab"], (3, 8))
        mask = torch.ones(3, 8)
        mask[1, 5:] = 0
        torch.testing.assert_close(classify(model, x, mask), classify(self.exported, x, mask))

    def test_positions_repeat_the_stored_table(self):
        pos = self.exported.pos.detach()
        model = self.load_into(max_len=20)
        torch.testing.assert_close(model.pos[8:16].detach(), pos)
        torch.testing.assert_close(model.pos[16:20].detach(), pos[:4])

    def test_a_shorter_model_is_refused(self):
        # shrinking is not supported: load_state_dict refuses the mismatched table
        with self.assertRaises(RuntimeError):
            self.load_into(max_len=4)

    def test_a_model_whose_head_fits_neither_role_is_refused(self):
        torch.jit.script(sharebert(max_len=8, out_dim=7).eval()).save(self.path)
        with self.assertRaisesRegex(ValueError, "neither a 5-label classifier nor a"):
            self.load_into(max_len=8)


class ExportedEmbeddingInit(unittest.TestCase):
    """Continuing an exported embedding model: its head is the contrastive projection, loaded into
    the model itself; the auxiliary section classifier starts fresh."""

    def test_the_loaded_model_reproduces_the_exported_embeddings(self):
        exported = sharebert(max_len=8, out_dim=SIZE["hidden"]).eval()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.pt")
            torch.jit.script(exported).save(path)
            model = sharebert(max_len=8, out_dim=SIZE["hidden"])
            encoder, classifier = train.init_weights(path, model, nn.Linear(SIZE["hidden"], LABELS))
        self.assertIsNone(classifier)
        missing, unexpected = model.load_state_dict(encoder, strict=False)
        self.assertEqual(unexpected, [])
        self.assertTrue(all(k in families.PREPARED_MATRICES for k in missing), missing)
        x = torch.randint(4, SIZE["vocab"], (2, 8))
        mask = torch.ones(2, 8)
        torch.testing.assert_close(classify(model.eval(), x, mask), classify(exported, x, mask))


class WordDropout(unittest.TestCase):
    def test_drops_only_real_pieces_of_the_labelled_rows(self):
        torch.manual_seed(0)
        mask = torch.ones(6, 400)
        mask[:, 300:] = 0  # padding
        out = train.drop_tokens(mask, rows=4, p=0.25)
        self.assertTrue(torch.equal(out[4:], mask[4:]), "alignment pairs are untouched")
        self.assertTrue(torch.equal(out[:, 0], mask[:, 0]), "bos is never dropped")
        self.assertTrue(torch.equal(out[:, 300:], mask[:, 300:]), "padding stays padding")
        self.assertTrue(torch.all(out <= mask))
        share = 1 - out[:4, 1:300].mean().item()
        self.assertAlmostEqual(share, 0.25, delta=0.03)
        self.assertTrue(torch.equal(mask[:4, 1:300], torch.ones(4, 299)), "the input mask is not modified")


if __name__ == "__main__":
    unittest.main()
