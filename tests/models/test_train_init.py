#!/usr/bin/env python3
"""Fine-tuning helpers of models/odeserve_models/train/train.py: starting from an exported classifier's or
embedding model's model.pt, extending the learned positions for longer inputs, word dropout, and
distillation from the TF-IDF teacher (odeserve_models/train/tfidf_teacher.py).

  PYTHONPATH=models /usr/bin/python3 -m unittest discover -s tests/models -p 'test_train_init.py'
"""
import os
import tempfile
import unittest

import numpy as np
import torch
import torch.nn as nn

from odeserve_models import cpu, families

from odeserve_models.train import tfidf_teacher, train


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


class Distillation(unittest.TestCase):
    def test_the_loss_is_zero_at_the_teacher_and_grows_away_from_it(self):
        teacher = torch.softmax(torch.tensor([[2.0, 0.5, -1.0], [0.0, 3.0, 1.0]]), -1)
        for temperature in (1.0, 2.0):
            at_teacher = train.distillation_loss(torch.log(teacher), teacher, temperature)
            self.assertAlmostEqual(at_teacher.item(), 0.0, places=5)
            away = train.distillation_loss(torch.log(teacher).flip(-1), teacher, temperature)
            self.assertGreater(away.item(), 0.1)

    def test_its_gradient_pulls_the_logits_towards_the_teacher(self):
        teacher = torch.tensor([[0.7, 0.2, 0.1]])
        logits = torch.zeros(1, 3, requires_grad=True)
        train.distillation_loss(logits, teacher, 2.0).backward()
        self.assertLess(logits.grad[0, 0].item(), 0.0, "the teacher's favourite is raised")
        self.assertGreater(logits.grad[0, 2].item(), 0.0, "its least likely class is lowered")

    def test_teacher_rows_follow_the_training_rows_by_md5(self):
        labels = ["a", "b"]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.npz")
            np.savez(path, md5=np.array(["m1", "m2"]), probs=np.array([[0.9, 0.1], [0.2, 0.8]], np.float32),
                     labels=np.array(labels))
            got = train.load_teacher(path, [{"md5": "m2"}, {"md5": "m1"}], labels)
            torch.testing.assert_close(got, torch.tensor([[0.2, 0.8], [0.9, 0.1]]))
            with self.assertRaisesRegex(ValueError, "no teacher probabilities for 1 training rows"):
                train.load_teacher(path, [{"md5": "m3"}], labels)
            with self.assertRaisesRegex(ValueError, "teacher labels"):
                train.load_teacher(path, [{"md5": "m1"}], ["b", "a"])

    def test_a_source_package_keeps_its_fold(self):
        # sha256, not Python's salted hash: the same folds on every run and machine
        self.assertEqual(tfidf_teacher.fold_of("firefox-esr", 5), 4)
        self.assertEqual(tfidf_teacher.fold_of("python-multi-key-dict", 5), 3)
        folds = {tfidf_teacher.fold_of("source-%d" % i, 5) for i in range(200)}
        self.assertEqual(folds, set(range(5)))


class AutocastDefault(unittest.TestCase):
    def cpu(self, flags):
        with tempfile.NamedTemporaryFile("w", suffix=".cpuinfo", delete=False) as f:
            f.write("processor\t: 0\nflags\t\t: %s\n\nprocessor\t: 1\nflags\t\t: %s\n" % (flags, flags))
        self.addCleanup(os.unlink, f.name)
        return cpu.native_bfloat16(f.name)

    def test_native_only_with_a_bfloat16_instruction_set(self):
        self.assertTrue(self.cpu("fpu sse2 avx2 fma avx512f avx512_bf16"))
        self.assertTrue(self.cpu("fpu avx2 amx_bf16 amx_tile"))
        self.assertFalse(self.cpu("fpu sse2 avx2 fma avx512f avx512bw"), "Zen 3 / Skylake-X: emulated")
        self.assertFalse(self.cpu("fpu avx512_bf16x"), "a whole flag, not a prefix")

    def test_an_explicit_choice_wins(self):
        self.assertTrue(cpu.autocast_enabled(1))
        self.assertFalse(cpu.autocast_enabled(0))
        self.assertEqual(cpu.autocast_enabled(-1), cpu.native_bfloat16())


if __name__ == "__main__":
    unittest.main()
