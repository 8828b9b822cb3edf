"""unresolvable_gap (models/odeserve_models/export.py): the quality tolerance `python3 -m odeserve_models
export-repository --quality-tolerance auto` writes, checked against the exact McNemar p-values it is built on."""
import math
import unittest

from odeserve_models.export import unresolvable_gap


def mcnemar_exact_p(wins, losses):
    """Two-sided exact McNemar p-value: the binomial test of `wins` against `losses` at 1/2."""
    n = wins + losses
    tail = sum(math.comb(n, k) for k in range(0, min(wins, losses) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


class UnresolvableGap(unittest.TestCase):
    def test_five_items_of_600_at_five_percent(self):
        self.assertAlmostEqual(unresolvable_gap(600), 5 / 600)
        self.assertAlmostEqual(unresolvable_gap(300), 5 / 300)
        self.assertAlmostEqual(unresolvable_gap(600, alpha=0.01), 7 / 600)

    def test_no_split_of_the_gap_is_significant_and_one_more_item_can_be(self):
        for alpha in (0.05, 0.01):
            d = round(unresolvable_gap(600, alpha) * 600)
            # A net difference of d items, whatever the discordant pairs around it: never below alpha.
            for losses in range(0, 40):
                self.assertGreaterEqual(mcnemar_exact_p(d + losses, losses), alpha)
            self.assertLess(mcnemar_exact_p(d + 1, 0), alpha)


if __name__ == "__main__":
    unittest.main()
