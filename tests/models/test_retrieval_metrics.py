"""recall@k of the retrieval evaluation (models/odeserve_models/baselines.py): ties with the right
candidate are broken at random, in expectation, never counted as hits."""
import unittest

import numpy as np

from odeserve_models.baselines import recall_at_k


class RecallAtK(unittest.TestCase):
    def test_the_right_candidate_first_is_a_hit(self):
        sim = np.array([[0.9, 0.1, 0.2], [0.3, 0.8, 0.1], [0.5, 0.6, 0.4]])
        r = recall_at_k(sim, (1, 2, 3))
        self.assertAlmostEqual(r[1], 2 / 3)  # query 2 has two candidates above its own
        self.assertAlmostEqual(r[2], 2 / 3)
        self.assertAlmostEqual(r[3], 1.0)

    def test_a_collapsed_model_scores_chance_not_one(self):
        sim = np.ones((4, 4))
        r = recall_at_k(sim, (1, 2, 4))
        self.assertAlmostEqual(r[1], 0.25)
        self.assertAlmostEqual(r[2], 0.5)
        self.assertAlmostEqual(r[4], 1.0)

    def test_a_duplicate_candidate_halves_the_hit(self):
        # Candidates 0 and 1 are the same text: query 0 ties with candidate 1 (and query 1 with 0).
        sim = np.array([[1.0, 1.0, 0.2], [1.0, 1.0, 0.1], [0.0, 0.1, 0.9]])
        r = recall_at_k(sim, (1, 2))
        self.assertAlmostEqual(r[1], (0.5 + 0.5 + 1) / 3)
        self.assertAlmostEqual(r[2], 1.0)


if __name__ == "__main__":
    unittest.main()
