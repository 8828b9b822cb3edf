#!/usr/bin/env python3
"""Masked-LM pre-training pieces (models/odeserve_models/mlm.py): BERT-style masking and the
tied / untied prediction heads of the three families.

  PYTHONPATH=models /usr/bin/python3 -m unittest discover -s tests/models -p 'test_mlm.py'
"""
import random
import unittest

import torch

from odeserve_models import families
from odeserve_models.mlm import MlmHead, mask_sequences, mlm_logits, token_states


BOS, EOS, MASK, VOCAB = 2, 3, 1, 120


def rules(rng):
    return dict(maskable=lambda v: v not in (0, BOS, EOS), mask_input=MASK,
                random_input=lambda: rng.randrange(4, VOCAB), target_of=lambda v: v)


class Masking(unittest.TestCase):
    def test_rates_targets_and_specials(self):
        rng = random.Random(0)
        seqs = [[BOS] + [rng.randrange(4, VOCAB) for _ in range(30)] + [EOS] for _ in range(400)]
        masked, targets = mask_sequences(seqs, rng, p=0.15, **rules(rng))
        maskable = sum(len(s) - 2 for s in seqs)
        self.assertAlmostEqual(len(targets) / maskable, 0.15, delta=0.01)
        replaced = sum(masked[r][c] == MASK for r, c, _ in targets)
        kept = sum(masked[r][c] == seqs[r][c] for r, c, _ in targets)
        self.assertAlmostEqual(replaced / len(targets), 0.8, delta=0.03)
        self.assertAlmostEqual(kept / len(targets), 0.1, delta=0.03)  # a random draw rarely equals it
        for r, c, t in targets:
            self.assertEqual(t, seqs[r][c], "the target is the original piece")
            self.assertNotIn(c, (0, len(seqs[r]) - 1), "BOS/EOS are never masked")
        untouched = {(r, c) for r, c, _ in targets}
        for r, (s, m) in enumerate(zip(seqs, masked)):
            for c, (a, b) in enumerate(zip(s, m)):
                if (r, c) not in untouched:
                    self.assertEqual(a, b)

    def test_every_sequence_gets_a_target(self):
        rng = random.Random(1)
        seqs = [[BOS, 7, EOS], [BOS, 9, 10, EOS], [BOS, EOS]]
        _, targets = mask_sequences(seqs, rng, p=0.0, **rules(rng))
        self.assertEqual(sorted({r for r, _, _ in targets}), [0, 1], "a short row still trains; BOS+EOS has nothing")


class Heads(unittest.TestCase):
    def build(self, family):
        torch.manual_seed(0)
        common = dict(hidden=32, heads=2, ffn=64, trained_depth=4, max_len=16, out_dim=32)
        if family == "eelbert":
            return families.build("eelbert", hash_dim=16, **common)
        return families.build(family, vocab=VOCAB, emb=24, **common)

    def test_tied_where_the_family_has_a_table(self):
        for family, tied in (("sharebert", True), ("albert", True), ("eelbert", False)):
            model = self.build(family)
            head = MlmHead(model, VOCAB)
            self.assertEqual(head.tied, tied, family)
            x = torch.randn(3, 7, 16) if family == "eelbert" else torch.randint(4, VOCAB, (3, 7))
            mask = torch.ones(3, 7)
            targets = [(0, 1, 5), (2, 4, 9), (1, 6, 11)]
            logits, tgt = mlm_logits(model, head, x, mask, 2, targets)
            self.assertEqual(tuple(logits.shape), (3, VOCAB), family)
            self.assertEqual(tgt.tolist(), [5, 9, 11])
            loss = torch.nn.functional.cross_entropy(logits, tgt)
            loss.backward()
            if tied:  # the prediction trains the input embedding table itself
                table = MlmHead.table_of(model)
                self.assertGreater(float(table.grad.abs().sum()), 0.0, family)

    def test_token_states_match_the_pooled_path(self):
        model = self.build("albert").eval()
        x, mask = torch.randint(4, VOCAB, (2, 6)), torch.tensor([[1.0] * 6, [1.0] * 4 + [0.0] * 2])
        with torch.no_grad():
            states = token_states(model, x, mask, 4)
            h = model.input_stage(x, mask)
            for _ in range(4):
                h = h + model.vector_field(h, mask)
            pooled = model.pool(h, mask)
            m = mask.unsqueeze(-1)
            self.assertTrue(torch.allclose((states * m).sum(1) / m.sum(1), pooled, atol=1e-5))


if __name__ == "__main__":
    unittest.main()
