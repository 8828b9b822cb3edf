#!/usr/bin/env python3
"""The lexical expert of the section classifier (models/odeserve_models/lexical.py): its channels
ride through every solver unchanged, its features are those the trainer sums, a row's output
never depends on padding or on the rows batched with it, and the output is the product of the two
experts.

  PYTHONPATH=models /usr/bin/python3 -m unittest discover -s tests/models -p 'test_lexical.py'
"""
import unittest

import torch
import torch.nn.functional as F

from odeserve_models import families
from odeserve_models.lexical import LexicalClassifier, bigram_buckets, feature_rows
from odeserve_models.solvers import solve

from odeserve_models.train import train_lexical


VOCAB, CLASSES, BUCKETS, DEPTH = 40, 5, 31, 4


def classifier(weight=0.7, length_power=0.5):
    torch.manual_seed(3)
    encoder = families.build("sharebert", vocab=VOCAB, emb=8, hidden=16, heads=2, ffn=32, trained_depth=DEPTH,
                             max_len=12, out_dim=CLASSES)
    model = LexicalClassifier(encoder, VOCAB, CLASSES, buckets=BUCKETS, weight=weight, length_power=length_power)
    with torch.no_grad():
        model.lexical.copy_(torch.randn(VOCAB + BUCKETS, CLASSES))
        model.lexical_bias.copy_(torch.randn(CLASSES))
    model.eval()
    model.prepare()
    return model


def batch(seqs, pad_id=0, width=0):
    T = max(width, max(len(s) for s in seqs))
    x = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros(len(seqs), T)
    for i, s in enumerate(seqs):
        x[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1.0
    return x, mask


SEQS = [[2, 7, 9, 11, 3], [2, 30, 3], [2, 5, 5, 5, 8, 39, 12, 3]]


class LexicalExpert(unittest.TestCase):
    def test_every_solver_keeps_the_lexical_channels(self):
        model = classifier()
        x, mask = batch(SEQS)
        h0 = model.input_stage(x, mask)
        self.assertEqual(h0.shape[-1], 16 + CLASSES)
        for solver, n in (("EULER", 1), ("EULER", DEPTH), ("HEUN", 2), ("RK4", 1)):
            with torch.no_grad():
                h = solve(model, h0, mask, n, solver)
            self.assertTrue(torch.equal(h[:, :, 16:], h0[:, :, 16:]), solver)
            self.assertFalse(torch.equal(h[:, :, :16], h0[:, :, :16]), solver)

    def test_the_trainer_sums_the_features_the_model_pools(self):
        model = classifier(length_power=0.5)
        x, mask = batch(SEQS, width=10)
        with torch.no_grad():
            h = model.input_stage(x, mask)
            pooled = (h[:, :, 16:] * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).pow(0.5)
            bag = train_lexical.bags(SEQS, VOCAB, BUCKETS, 0.5)
            trained = train_lexical.lexical_logits(model.lexical, model.lexical_bias, bag, torch.arange(len(SEQS)))
        torch.testing.assert_close(pooled + model.lexical_bias, trained)
        # the last piece pairs with id 0, so its bigram row is fixed by the piece alone
        self.assertEqual(feature_rows([2, 3], VOCAB, BUCKETS), [2, 3, VOCAB + (2 * VOCAB + 3) % BUCKETS,
                                                                VOCAB + (3 * VOCAB) % BUCKETS])

    def test_padding_and_batch_neighbours_change_nothing(self):
        scripted = torch.jit.script(classifier())
        alone = [scripted.forward(*batch([s])) for s in SEQS]
        x, mask = batch(SEQS, pad_id=17, width=12)  # garbage ids in the padding
        together = scripted.forward(x, mask)
        for i, row in enumerate(alone):
            torch.testing.assert_close(together[i:i + 1], row)
        buckets = bigram_buckets(x, mask, VOCAB, BUCKETS)
        self.assertEqual(int(buckets[1, 2]), (3 * VOCAB) % BUCKETS)  # eos, then padding: id 0

    def test_the_output_is_the_product_of_the_experts(self):
        model = classifier(weight=0.0)
        x, mask = batch(SEQS)
        with torch.no_grad():
            h = solve(model, model.input_stage(x, mask), mask, DEPTH, "EULER")
            deep = model.encoder.output_stage(h[:, :, :16], mask)
            torch.testing.assert_close(model.output_stage(h, mask), F.log_softmax(deep, -1))
            model.weight = 2.0
            experts = model.experts(h, mask)
            torch.testing.assert_close(model.output_stage(h, mask), experts[0] + 2.0 * experts[1])
            # L Euler steps of dt = 1 are the trained model
            torch.testing.assert_close(model.forward(x, mask), model.output_stage(h, mask))


if __name__ == "__main__":
    unittest.main()
