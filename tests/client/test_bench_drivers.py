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


class OverOracle(unittest.TestCase):
    def test_steps_and_evaluations_over_the_oracle(self):
        adaptive = {"classes": [
            {"label": "5ms", "steps": {"mean": None}, "field_evaluations": {"mean": None}},
            {"label": "20ms", "steps": {"mean": 1.0}, "field_evaluations": {"mean": 2.0}},
            {"label": "40ms", "steps": {"mean": 3.0}, "field_evaluations": {"mean": 3.0}}]}
        oracle = {"5ms": 1, "20ms": 2, "40ms": 0}
        self.assertEqual(budget_benchmarks.over_oracle(adaptive, oracle, "steps"),
                         {"5ms": None, "20ms": 0.5, "40ms": None})
        self.assertEqual(budget_benchmarks.over_oracle(adaptive, oracle, "field_evaluations"),
                         {"5ms": None, "20ms": 1.0, "40ms": None})


class DeliveredQuality(unittest.TestCase):
    def model(self, points, measured=True):
        return {"qualityProfileMeasured": measured, "qualityProfile": points}

    def test_the_profile_is_keyed_as_the_bench_keys_its_choices(self):
        info = self.model([{"solver": "EULER", "steps": 1, "metric": "accuracy", "value": 0.6},
                           {"solver": "EULER", "steps": 1, "metric": "macro_f1", "value": 0.5},
                           {"solver": "HEUN", "steps": 4, "metric": "accuracy", "value": 0.8},
                           {"solver": "HEUN", "steps": 4, "metric": "macro_f1", "value": 0.7},
                           # translation points (decoder steps, beams) are not encoder choices
                           {"solver": "EULER", "steps": 4, "metric": "accuracy", "value": 30.0,
                            "decoderSteps": 4, "beamSize": 1}])
        # One metric, the first listed (a profile lists its primary metric first), unless named.
        self.assertEqual(budget_benchmarks.profile_quality(info), ({"euler-1": 0.6, "heun-4": 0.8}, "accuracy"))
        self.assertEqual(budget_benchmarks.profile_quality(info, "macro_f1"),
                         ({"euler-1": 0.5, "heun-4": 0.7}, "macro_f1"))

    def test_an_unmeasured_profile_gives_nothing(self):
        info = self.model([{"solver": "EULER", "steps": 1, "metric": "accuracy", "value": 0.6}], False)
        self.assertEqual(budget_benchmarks.profile_quality(info), ({}, ""))

    def test_each_answer_counts_at_the_quality_of_its_choice(self):
        quality = {"euler-1": 0.6, "euler-8": 0.8}
        self.assertAlmostEqual(budget_benchmarks.delivered_quality({"euler-1": 3, "euler-8": 1}, quality), 0.65)

    def test_an_unmeasured_choice_or_no_answer_is_unknown_not_zero(self):
        quality = {"euler-1": 0.6}
        self.assertIsNone(budget_benchmarks.delivered_quality({"euler-1": 3, "rk4-2": 1}, quality))
        self.assertIsNone(budget_benchmarks.delivered_quality({}, quality))
        self.assertIsNone(budget_benchmarks.delivered_quality({"euler-1": 3}, {}))


class Describe(unittest.TestCase):
    def report(self, **overrides):
        latency = {"p50": overrides.get("p50", 3.0), "p99": overrides.get("p99", 9.0)}
        cls = {"label": "5ms", "client_hit_rate": overrides.get("hit", 0.5),
               "steps": {"mean": overrides.get("steps", 2.0)},
               "field_evaluations": {"mean": overrides.get("evaluations", 4.0)}, "latency_ms": latency,
               "server_ms": {"queue_mean": overrides.get("queue", 0.4), "compute_mean": 1.5}}
        return {"throughput_rps": overrides.get("rps", 100.0),
                "overall": {"latency_ms": latency, "client_hit_rate": overrides.get("hit", 0.5), "errors": {}},
                "classes": [cls]}

    def test_formats_the_figures(self):
        line = compare_servers.describe("after", self.report())
        self.assertIn("after: 100.0 req/s, p50 3.00 ms, p99 9.00 ms, within budget 50.00%", line)
        self.assertIn("5ms: 50.00%, 2.00 steps (4.00 evaluations), p99 9.0 ms, server queue 0.4 + compute 1.5 ms", line)

    def test_null_figures_print_as_a_dash(self):
        # Every call failed: no latency, no steps, no queue time in the report.
        line = compare_servers.describe("broken", self.report(p50=None, p99=None, steps=None, evaluations=None,
                                                          queue=None, hit=0.0))
        self.assertIn("p50 - ms, p99 - ms", line)
        self.assertIn("5ms: 0.00%, - steps (- evaluations), p99 - ms, server queue - + compute 1.5 ms", line)


if __name__ == "__main__":
    unittest.main()


class HealthProbeOverOneChannel(unittest.TestCase):
    """budget_benchmarks.HealthProbe against an in-process grpc.health.v1 stand-in that answers
    with the status bytes under test and records what it was asked."""

    def setUp(self):
        try:
            import grpc
        except ImportError:
            self.skipTest("python3-grpcio is not installed")
        from concurrent import futures
        self.reply, self.asked = b"\x08\x01", []

        def check(request, context):
            self.asked.append(request)
            return self.reply

        handler = grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
            "Check": grpc.unary_unary_rpc_method_handler(check, request_deserializer=lambda b: b,
                                                         response_serializer=lambda b: b)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.probe = budget_benchmarks.HealthProbe("127.0.0.1:%d" % port, "odeserve.v1.Inference")

    def tearDown(self):
        self.probe.close()
        self.server.stop(None)

    def test_serving_gives_a_latency_and_asks_for_the_service(self):
        ms = self.probe.check_ms()
        self.assertIsNotNone(ms)
        self.assertGreater(ms, 0)
        self.assertEqual(self.asked[-1], b"\x0a\x15odeserve.v1.Inference")
        self.assertEqual(self.probe.failures, 0)

    def test_not_serving_and_failed_calls_count_as_failures(self):
        self.reply = b"\x08\x02"  # NOT_SERVING
        self.assertIsNone(self.probe.check_ms())
        self.server.stop(None)
        self.assertIsNone(self.probe.check_ms())
        self.assertEqual(self.probe.failures, 2)
