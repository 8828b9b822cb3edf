#!/usr/bin/env python3
"""The translator's shortlist projection (SharedTranslator.exact_logit_candidates): bfloat16
ranking of the vocabulary, the K best logits of every row recomputed in float32.

  PYTHONPATH=models /usr/bin/python3 -m unittest discover -s tests/models -p 'test_translation_logits.py'
"""
import io
import unittest

import torch

from odeserve_models.translation import SharedTranslator


VOCAB, HIDDEN, K = 500, 64, 16


def translator(candidates):
    torch.manual_seed(3)
    model = SharedTranslator(VOCAB, hidden=HIDDEN, heads=4, ffn=128, encoder_depth=2, decoder_depth=2,
                             max_len=32)
    with torch.no_grad():  # a trained-looking output layer: a few tokens clearly ahead
        model.out_bias.normal_(0.0, 2.0)
        model.d_ln_f_w.fill_(3.0)
    model.exact_logit_candidates = candidates
    return torch.jit.script(model.eval())


class ShortlistLogits(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.exact = translator(0)
        cls.fast = translator(K)
        cls.exact.prepare()
        cls.fast.prepare()
        torch.manual_seed(11)
        cls.g = torch.randn(24, 1, HIDDEN)
        with torch.inference_mode():
            cls.exact_lp = cls.exact.decoder_logits(cls.g)
            cls.fast_lp = cls.fast.decoder_logits(cls.g)

    def test_is_a_distribution(self):
        self.assertEqual(tuple(self.fast_lp.shape), (24, VOCAB))
        self.assertEqual(self.fast_lp.dtype, torch.float32)
        total = self.fast_lp.exp().sum(-1)
        self.assertLess((total - 1).abs().max().item(), 1e-5)

    def test_best_candidates_match_float32(self):
        # The tokens any search takes (the best 2 x beam of a row) are in the shortlist: their
        # log-probabilities differ from float32 only through the normalizer's rounded tail.
        top_exact = self.exact_lp.topk(K // 2, -1)
        top_fast = self.fast_lp.topk(K // 2, -1)
        self.assertTrue(torch.equal(top_exact.indices, top_fast.indices))
        self.assertLess((top_exact.values - top_fast.values).abs().max().item(), 2e-3)

    def test_differences_between_candidates_are_exact(self):
        # Inside a row the shortlisted logits are float32 values, so the gap between two
        # candidates (what decides a ranking) is exact up to float32 rounding.
        idx = self.exact_lp.topk(K // 2, -1).indices
        gap_exact = self.exact_lp.gather(1, idx) - self.exact_lp.gather(1, idx[:, :1])
        gap_fast = self.fast_lp.gather(1, idx) - self.fast_lp.gather(1, idx[:, :1])
        self.assertLess((gap_exact - gap_fast).abs().max().item(), 1e-4)

    def test_tail_is_bfloat16_rounded(self):
        # Not equal (the test would prove nothing if the fast path silently ran float32) and
        # close (bfloat16 keeps 8 bits of mantissa).
        diff = (self.exact_lp - self.fast_lp).abs().max().item()
        self.assertGreater(diff, 0.0)
        self.assertLess(diff, 0.25)

    def test_single_row_matches_batched(self):
        with torch.inference_mode():
            one = self.fast.decoder_logits(self.g[:1])
        self.assertLess((one - self.fast_lp[:1]).abs().max().item(), 1e-5)

    def test_without_prepare_runs_float32(self):
        model = translator(K)  # prepare() not called: no bfloat16 copy, exact projection
        with torch.inference_mode():
            lp = model.decoder_logits(self.g)
        self.assertLess((lp - self.exact_lp).abs().max().item(), 1e-5)

    def test_bfloat16_copy_is_not_stored(self):
        unprepared, prepared = io.BytesIO(), io.BytesIO()
        torch.jit.save(translator(K), unprepared)
        export_copy = translator(K)
        export_copy.prepare()
        export_copy.projection_bf16 = torch.zeros(0, dtype=torch.bfloat16)  # as the exporter does
        torch.jit.save(export_copy, prepared)
        self.assertLess(abs(len(prepared.getvalue()) - len(unprepared.getvalue())), 4096)
        loaded = torch.jit.load(io.BytesIO(unprepared.getvalue()))
        self.assertEqual(loaded.exact_logit_candidates, K)
        loaded.prepare()
        with torch.inference_mode():
            self.assertLess((loaded.decoder_logits(self.g) - self.fast_lp).abs().max().item(), 1e-6)


if __name__ == "__main__":
    unittest.main()
