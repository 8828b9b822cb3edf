#!/usr/bin/env python3
"""The Python mirror of the server's beam search (odeserve_models.translation.beam_search) with
a length penalty: finished hypotheses rank by log-probability / tokens ** length_penalty, the
search itself by raw log-probability, as in server/runtime/translation_executor.cc.

  PYTHONPATH=models /usr/bin/python3 -m unittest discover -s tests/models -p 'test_beam_length_penalty.py'
"""
import math
import unittest

import torch

from odeserve_models.translation import SharedTranslator, beam_search


MAX_OUT = 20
PENALTIES = (0.5, 1.0, 2.0)


class BeamLengthPenalty(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.manual_seed(5)
        model = SharedTranslator(300, hidden=32, heads=2, ffn=64, encoder_depth=2, decoder_depth=2, max_len=32)
        with torch.no_grad():  # EOS likely enough that hypotheses end at several lengths
            model.out_bias.normal_(0.0, 1.0)
            model.out_bias[model.eos_id] = 6.0
        cls.model = model.eval()
        ids = torch.randint(4, 300, (12, 9))
        mask = torch.ones(12, 9)
        with torch.no_grad():
            cls.runs = {p: beam_search(cls.model, ids, mask, 2, 2, 4, [MAX_OUT] * 12, length_penalty=p)
                        for p in PENALTIES}

    def test_a_larger_penalty_never_picks_a_shorter_translation(self):
        lengths = {p: [len(tokens) for tokens, _ in self.runs[p]] for p in PENALTIES}
        for low, high in zip(PENALTIES, PENALTIES[1:]):
            for row, (short, long_) in enumerate(zip(lengths[low], lengths[high])):
                self.assertGreaterEqual(long_, short, "row %d, penalty %g -> %g" % (row, low, high))
        self.assertGreater(sum(lengths[2.0]), sum(lengths[0.5]), "the penalty must change some choice")

    def test_scores_are_log_probability_over_tokens_to_the_penalty(self):
        compared = 0
        for low, high in zip(PENALTIES, PENALTIES[1:]):
            for (tokens_a, score_a), (tokens_b, score_b) in zip(self.runs[low], self.runs[high]):
                if tokens_a != tokens_b:
                    continue
                n = len(tokens_a) + (1 if len(tokens_a) < MAX_OUT else 0)  # EOS counted
                self.assertAlmostEqual(score_a * n ** low, score_b * n ** high, places=4)
                self.assertLess(score_a, 0.0)
                compared += 1
        self.assertGreater(compared, 0)

    def test_greedy_is_unaffected(self):
        ids = torch.randint(4, 300, (6, 7))
        mask = torch.ones(6, 7)
        with torch.no_grad():
            plain = beam_search(self.model, ids, mask, 2, 2, 1, [MAX_OUT] * 6)
            penalised = beam_search(self.model, ids, mask, 2, 2, 1, [MAX_OUT] * 6, length_penalty=2.0)
        for (tokens_a, score_a), (tokens_b, score_b) in zip(plain, penalised):
            self.assertEqual(tokens_a, tokens_b)
            n = len(tokens_a) + (1 if len(tokens_a) < MAX_OUT else 0)
            self.assertTrue(math.isclose(score_a * n, score_b * n ** 2, rel_tol=1e-5))


if __name__ == "__main__":
    unittest.main()
