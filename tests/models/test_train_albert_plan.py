#!/usr/bin/env python3
"""train-albert's time plan on --resume (models/odeserve_models/train/train_albert.py, resumed_plan).

  PYTHONPATH=models /usr/bin/python3 -m unittest discover -s tests/models -p 'test_train_albert_plan.py'
"""
import unittest

from odeserve_models.train.train_albert import resumed_plan

MIN = 60.0


class ResumedPlan(unittest.TestCase):
    def test_a_plan_that_fits_is_kept(self):
        budget = {"pretrain": 100 * MIN, "finetune": 50 * MIN}
        got, scale = resumed_plan(budget, {"pretrain": 90 * MIN, "finetune": 0.0}, "pretrain", 70 * MIN)
        self.assertEqual((got, scale), (budget, 1.0))

    def test_both_remaining_phases_shrink_in_proportion(self):
        got, scale = resumed_plan({"pretrain": 100 * MIN, "finetune": 50 * MIN},
                                  {"pretrain": 90 * MIN, "finetune": 0.0}, "pretrain", 30 * MIN)
        self.assertAlmostEqual(scale, 0.5)
        self.assertAlmostEqual(got["pretrain"], 95 * MIN)
        self.assertAlmostEqual(got["finetune"], 25 * MIN)

    def test_pretrain_minutes_replace_the_total_and_the_fine_tuning_plan_waits(self):
        # --pretrain-minutes 153 --stop-after-pretraining, 26 minutes available: pre-training's
        # 19.7 minutes fit; fine-tuning is not run by this invocation and keeps its plan.
        budget = {"pretrain": 347.2 * MIN, "finetune": 148.8 * MIN}
        elapsed = {"pretrain": 133.3 * MIN, "finetune": 0.0}
        got, scale = resumed_plan(budget, elapsed, "pretrain", 26 * MIN, 153 * MIN, stop_after_pretraining=True)
        self.assertEqual(scale, 1.0)
        self.assertAlmostEqual(got["pretrain"], 153 * MIN)
        self.assertAlmostEqual(got["finetune"], 148.8 * MIN)
        # Without --stop-after-pretraining the same call must fit both phases in the 26 minutes.
        got, scale = resumed_plan(budget, elapsed, "pretrain", 26 * MIN, 153 * MIN)
        self.assertLess(scale, 1.0)
        self.assertAlmostEqual(got["pretrain"] - elapsed["pretrain"] + got["finetune"], 26 * MIN)

    def test_pretrain_minutes_never_end_before_what_is_done_nor_apply_in_fine_tuning(self):
        elapsed = {"pretrain": 133.3 * MIN, "finetune": 0.0}
        got, _ = resumed_plan({"pretrain": 347.2 * MIN, "finetune": 10 * MIN}, elapsed, "pretrain", 1e9, 100 * MIN)
        self.assertAlmostEqual(got["pretrain"], 133.3 * MIN)
        got, _ = resumed_plan({"pretrain": 153 * MIN, "finetune": 10 * MIN},
                              {"pretrain": 153 * MIN, "finetune": 5 * MIN}, "finetune", 1e9, 200 * MIN)
        self.assertAlmostEqual(got["pretrain"], 153 * MIN)

    def test_in_fine_tuning_only_its_remainder_is_shrunk(self):
        got, scale = resumed_plan({"pretrain": 153 * MIN, "finetune": 148.8 * MIN},
                                  {"pretrain": 153 * MIN, "finetune": 0.0}, "finetune", 55.9 * MIN)
        self.assertAlmostEqual(scale, 55.9 / 148.8)
        self.assertAlmostEqual(got["finetune"], 55.9 * MIN)
        self.assertAlmostEqual(got["pretrain"], 153 * MIN)


if __name__ == "__main__":
    unittest.main()
