"""The Python benchmark drivers' report handling (client/bench), without servers."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "bench"))

import budget_benchmarks  # noqa: E402
import compare_servers  # noqa: E402


class SaturationRate(unittest.TestCase):
    def test_a_healthy_sweep_gives_its_saturation(self):
        sweep = {"sweep": {"saturation_rps": 210.0, "points": [{"throughput_rps": 230.0}]}}
        self.assertEqual(budget_benchmarks.saturation_rate(sweep), 210.0)

    def test_no_healthy_level_falls_back_to_the_best_level(self):
        sweep = {"sweep": {"saturation_rps": 0, "points": [{"throughput_rps": 40.0},
                                                            {"throughput_rps": None},
                                                            {"throughput_rps": 55.5}]}}
        self.assertEqual(budget_benchmarks.saturation_rate(sweep), 55.5)

    def test_a_sweep_that_served_nothing_gives_none(self):
        for points in ([], [{"throughput_rps": 0}], [{"throughput_rps": None}]):
            self.assertIsNone(budget_benchmarks.saturation_rate({"sweep": {"saturation_rps": 0, "points": points}}))


class Describe(unittest.TestCase):
    def report(self, **overrides):
        latency = {"p50": overrides.get("p50", 3.0), "p99": overrides.get("p99", 9.0)}
        cls = {"label": "5ms", "client_hit_rate": overrides.get("hit", 0.5),
               "steps": {"mean": overrides.get("steps", 2.0)}, "latency_ms": latency,
               "server_ms": {"queue_mean": overrides.get("queue", 0.4), "compute_mean": 1.5}}
        return {"throughput_rps": overrides.get("rps", 100.0),
                "overall": {"latency_ms": latency, "client_hit_rate": overrides.get("hit", 0.5), "errors": {}},
                "classes": [cls]}

    def test_formats_the_figures(self):
        line = compare_servers.describe("after", self.report())
        self.assertIn("after: 100.0 req/s, p50 3.00 ms, p99 9.00 ms, within budget 50.00%", line)
        self.assertIn("5ms: 50.00%, 2.00 steps, p99 9.0 ms, server queue 0.4 + compute 1.5 ms", line)

    def test_null_figures_print_as_a_dash(self):
        # Every call failed: no latency, no steps, no queue time in the report.
        line = compare_servers.describe("broken", self.report(p50=None, p99=None, steps=None, queue=None, hit=0.0))
        self.assertIn("p50 - ms, p99 - ms", line)
        self.assertIn("5ms: 0.00%, - steps, p99 - ms, server queue - + compute 1.5 ms", line)


if __name__ == "__main__":
    unittest.main()
