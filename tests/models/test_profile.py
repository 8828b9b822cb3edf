"""The pure parts of `python3 -m odeserve_models profile` (models/odeserve_models/profile.py),
without a server: the steps spec, the metrics on hand-made cases, the default_steps rule, the
JSONL checks, the profile text, --apply's config edit and the progress bar."""
import contextlib
import io
import os
import re
import shutil
import tempfile
import unittest

import numpy as np

from odeserve_models import profile as P


def pts(values, solver="EULER", metric="accuracy", first_step=1):
    return [dict(solver=solver, steps=first_step + i, metric=metric, value=v, dataset="d (4)")
            for i, v in enumerate(values)]


class StepsSpec(unittest.TestCase):
    def test_ranges_and_single_steps_sorted_and_deduplicated(self):
        self.assertEqual(P.parse_steps("1-8,16"), [1, 2, 3, 4, 5, 6, 7, 8, 16])
        self.assertEqual(P.parse_steps(" 4, 2-3 ,3,2 "), [2, 3, 4])
        self.assertEqual(P.parse_steps("5"), [5])
        self.assertEqual(P.parse_steps("3-3"), [3])

    def test_bad_specs_are_refused(self):
        for spec in ("", "a", "1-", "-3", "0", "1-x", "4-2", "1,,2", "2.5"):
            with self.assertRaises(P.ProfileError, msg=spec):
                P.parse_steps(spec)

    def test_steps_outside_the_models_range_are_named(self):
        self.assertEqual(P.parse_steps("1-8", 1, 8), list(range(1, 9)))
        with self.assertRaises(P.ProfileError) as e:
            P.parse_steps("1-8,16", 1, 8)
        self.assertIn("16", str(e.exception))
        self.assertIn("[1, 8]", str(e.exception))

    def test_the_compact_form_round_trips(self):
        self.assertEqual(P._steps_spec([1, 2, 3, 5, 7, 8, 16]), "1-3,5,7-8,16")
        self.assertEqual(P.parse_steps(P._steps_spec([1, 2, 3, 5, 7, 8, 16])), [1, 2, 3, 5, 7, 8, 16])

    def test_solvers(self):
        self.assertEqual(P.parse_solvers("", ["EULER", "HEUN"]), ["EULER", "HEUN"])
        self.assertEqual(P.parse_solvers("heun, euler,heun", ["EULER", "HEUN"]), ["HEUN", "EULER"])
        with self.assertRaises(P.ProfileError):
            P.parse_solvers("RK4", ["EULER", "HEUN"])  # not allowed by the model
        with self.assertRaises(P.ProfileError):
            P.parse_solvers("midpoint", ["EULER"])


class Metrics(unittest.TestCase):
    def test_accuracy(self):
        self.assertAlmostEqual(P.accuracy([0, 1, 2, 2], [0, 1, 1, 2]), 0.75)
        self.assertAlmostEqual(P.accuracy([3], [3]), 1.0)

    def test_macro_f1_by_hand(self):
        # class 0: tp 2, fp 0, fn 0 -> 1; class 1: tp 1, fp 1, fn 0 -> 2/3; class 2: tp 0, fp 0, fn 1 -> 0;
        # class 3 absent from both: not counted.
        m = P.classification_metrics([0, 0, 1, 2], [0, 0, 1, 1], n_classes=4)
        self.assertAlmostEqual(m["accuracy"], 0.75)
        self.assertAlmostEqual(m["macro_f1"], (1 + 2 / 3 + 0) / 3)

    def test_recall_at_k_by_cosine(self):
        # Query i's match is document i. Documents are unit vectors along axes; queries are scaled
        # (cosine ignores length). Query 2 points between documents 0 and 1: its own document ranks third.
        docs = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float32)
        queries = np.array([[5, 0.1, 0], [0, 2, 0], [1, 1, 0.1]], dtype=np.float32)
        m = P.retrieval_metrics(queries, docs)
        self.assertAlmostEqual(m["recall@1"], 2 / 3)
        self.assertAlmostEqual(m["recall@10"], 1.0)

    def test_recall_ties_count_in_expectation_not_as_hits(self):
        m = P.retrieval_metrics(np.ones((4, 2)), np.ones((4, 2)))  # everything identical
        self.assertAlmostEqual(m["recall@1"], 0.25)

    def test_points_and_dataset_name(self):
        p = P.make_points([("EULER", 1, {"accuracy": 0.5, "macro_f1": 0.4})], P.CLASSIFICATION_METRICS,
                          P.dataset_name("/x/y/valid.jsonl", 12))
        self.assertEqual([q["metric"] for q in p], ["accuracy", "macro_f1"])
        self.assertEqual(p[0]["dataset"], "valid.jsonl (12)")


class Recommendation(unittest.TestCase):
    def test_inclusive_tolerance(self):
        # steps 1..4 -> 0.70, 0.74, 0.75, 0.75; best 0.75, tolerance 0.01: 0.74 >= 0.75 - 0.01 counts
        # as within (inclusive, the server's comparison), so 2 steps is the default.
        r = P.recommend_default(pts([0.70, 0.74, 0.75, 0.75]), "accuracy", 0.01)
        self.assertEqual((r["steps"], r["best_steps"], r["best_value"]), (2, 3, 0.75))
        self.assertEqual(P.recommend_default(pts([0.70, 0.74, 0.75, 0.75]), "accuracy", 0.009)["steps"], 3)
        self.assertEqual(P.recommend_default(pts([0.70, 0.74, 0.75, 0.75]), "accuracy", 0.05)["steps"], 1)
        self.assertEqual(P.recommend_default(pts([0.70, 0.74, 0.75, 0.75]), "accuracy", 0.0)["steps"], 3)

    def test_only_euler_points_of_the_primary_metric_count(self):
        points = pts([0.70, 0.74, 0.75]) + pts([0.99, 0.99, 0.99], solver="HEUN") \
            + pts([0.10, 0.99, 0.10], metric="macro_f1")
        r = P.recommend_default(points, "accuracy", 0.0)
        self.assertEqual((r["steps"], r["best_value"]), (3, 0.75))
        self.assertIsNone(P.recommend_default(pts([0.9], solver="HEUN"), "accuracy", 0.0))

    def test_order_of_points_does_not_matter(self):
        points = list(reversed(pts([0.60, 0.80, 0.79, 0.80], first_step=2)))
        self.assertEqual(P.recommend_default(points, "accuracy", 0.01)["steps"], 3)

    def test_auto_tolerance_is_the_unresolvable_gap_and_an_exact_gap_is_within(self):
        from odeserve_models.export import unresolvable_gap
        t, how = P.resolve_tolerance("auto", 600)
        self.assertAlmostEqual(t, unresolvable_gap(600), places=8)
        self.assertIn("5 of 600", how)
        # Values k/N exactly d items below the best must count as within for every k, N: without
        # the slack, floating-point rounding puts some of them outside.
        for n in (12, 37, 300, 600, 999):
            t, _ = P.resolve_tolerance("auto", n)
            d = round((t - P.TOLERANCE_SLACK) * n)
            for k in range(d, n + 1):
                r = P.recommend_default(pts([(k - d) / n, k / n]), "accuracy", t)
                self.assertEqual(r["steps"], 1, (n, k, d))
                if k >= d + 1:  # one item more is outside
                    r = P.recommend_default(pts([(k - d - 1) / n, k / n]), "accuracy", t)
                    self.assertEqual(r["steps"], 2, (n, k, d))

    def test_given_tolerance(self):
        self.assertEqual(P.resolve_tolerance("0.02", 10)[0], 0.02)
        for bad in ("-0.1", "nan", "inf", "lots"):
            with self.assertRaises(P.ProfileError, msg=bad):
                P.resolve_tolerance(bad, 10)

    def test_depth_gain_line(self):
        line = P.depth_gain(pts([0.70, 0.74, 0.75, 0.80]), "accuracy", 4)
        self.assertIn("0.7000 -> 0.8000", line)
        self.assertIn("+10.00 points", line)
        self.assertIn("not measured", P.depth_gain(pts([0.70, 0.74]), "accuracy", 4))


class Jsonl(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def write(self, text, name="d.jsonl"):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(text.encode("utf-8") if isinstance(text, str) else text)
        return path

    def error(self, text, fields=("text", "label"), **kw):
        path = self.write(text)
        with self.assertRaises(P.ProfileError) as e:
            P.read_jsonl(path, fields, **kw)
        return str(e.exception)

    def test_reads_records_with_line_numbers_skipping_blank_lines(self):
        path = self.write('{"text": "a b", "label": "libs"}\n\n{"text": "c", "label": 3, "x": 1}\n')
        self.assertEqual(P.read_jsonl(path, ("text", "label"), label_field="label"),
                         [(1, ("a b", "libs")), (3, ("c", "3"))])

    def test_limit_takes_the_first_records(self):
        path = self.write("".join('{"text": "t%d", "label": "x"}\n' % i for i in range(5)) + "not json\n")
        self.assertEqual([r[1][0] for r in P.read_jsonl(path, ("text", "label"), limit=2)], ["t0", "t1"])
        with self.assertRaises(P.ProfileError):
            P.read_jsonl(path, ("text", "label"))  # line 6 is bad once read

    def test_errors_name_the_line(self):
        self.assertIn("d.jsonl:2: not valid JSON", self.error('{"text": "a", "label": "x"}\n{"text": "a",\n'))
        msg = self.error('{"text": "a", "label": "x"}\n{"txt": "a", "label": "x"}\n',
                         field_options={"text": "--text_field"})
        self.assertIn("d.jsonl:2: no field 'text'", msg)
        self.assertIn("--text_field", msg)
        self.assertIn("d.jsonl:1: expected a JSON object", self.error('["a", "b"]\n'))
        self.assertIn("d.jsonl:1: field 'text' must be a string", self.error('{"text": 5, "label": "x"}\n'))
        self.assertIn("d.jsonl:1: field 'text' is empty", self.error('{"text": "  ", "label": "x"}\n'))
        self.assertIn("d.jsonl:2: not valid UTF-8", self.error(b'{"text": "a", "label": "x"}\n{"text": "\xff"}\n'))
        self.assertIn("holds no records", self.error("\n\n"))
        self.assertIn("d.jsonl:1: field 'label' must be a string",
                      self.error('{"text": "a", "label": true}\n', label_field="label"))

    def test_unknown_labels_are_refused_naming_the_line(self):
        P.check_labels("d.jsonl", [1, 2], ["libs", "games"], ["libs", "python", "games", "other"])
        with self.assertRaises(P.ProfileError) as e:
            P.check_labels("d.jsonl", [1, 4, 7], ["libs", "sports", "cooking"], ["libs", "games"])
        msg = str(e.exception)
        self.assertIn("d.jsonl:4: label 'sports'", msg)
        self.assertIn("line 7: 'cooking'", msg)
        self.assertIn("libs, games", msg)


class ProfileTextAndApply(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not shutil.which("protoc"):
            raise unittest.SkipTest("protoc not installed")
        P.load_protos()

    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def points(self):
        measured = [("EULER", n, {"accuracy": v, "macro_f1": v - 0.1}) for n, v in ((1, 0.5), (2, 2 / 3), (4, 0.75))]
        measured.append(("HEUN", 1, {"accuracy": 0.7, "macro_f1": 0.6}))
        return P.make_points(measured, P.CLASSIFICATION_METRICS, 'my "valid".jsonl (12)')

    def test_text_is_one_line_per_point_and_reads_back_exactly(self):
        text = P.profile_text(P.profile_message("accuracy", self.points()))
        lines = text.splitlines()
        self.assertEqual(lines[0], 'primary_metric: "accuracy"')
        self.assertEqual(len(lines), 1 + 8)
        self.assertTrue(lines[1].startswith('points { solver: EULER steps: 1 metric: "accuracy" value: 0.5 dataset: '))
        back = P.points_of(P.parse_profile_text(text))
        self.assertEqual(back, self.points())  # every digit kept: 2/3 reads back as 2/3

    CONFIG = """# a hand-written config: its comment is not kept
name: "tiny"
task: CLASSIFICATION
version: "1"
torchscript_file: "model.pt"
tokenizer { model_file: "tokenizer.model" input_kind: TOKEN_IDS add_bos: true }
max_sequence_length: 32
trained_depth: 4
steps { min: 1 max: 8 default_steps: 4 }
solvers: EULER
solvers: HEUN
labels: "libs"
labels: "games"
batching { max_batch_size: 16 max_queue_delay_us: 0 }
max_inputs_per_request: 32
compute_precision: BFLOAT16
"""

    def test_apply_sets_the_profile_and_tolerance_and_drops_default_steps(self):
        model_dir = os.path.join(self.dir, "tiny")
        os.makedirs(model_dir)
        with open(os.path.join(model_dir, "config.pbtxt"), "w") as f:
            f.write(self.CONFIG)
        from google.protobuf import text_format
        _, _, mc = P.load_protos()
        before = text_format.Parse(self.CONFIG, mc.ModelConfig())
        text = P.profile_text(P.profile_message("accuracy", self.points()))
        r = P.apply_to_model_dir(model_dir, "tiny", text, 0.0125)
        self.assertEqual(r["previous_default_steps"], 4)
        self.assertTrue(r["comments_dropped"])
        with open(os.path.join(model_dir, "config.pbtxt")) as f:
            written = f.read()
        self.assertNotIn("default_steps", written)
        after = text_format.Parse(written, mc.ModelConfig())
        self.assertEqual(after.quality_profile_file, "quality.pbtxt")
        self.assertEqual(after.quality_tolerance, 0.0125)
        self.assertEqual((after.steps.min, after.steps.max, after.steps.default_steps), (1, 8, 0))
        self.assertTrue(after.batching.HasField("max_queue_delay_us"))  # explicit presence kept
        # Nothing else changed.
        before.steps.default_steps = 0
        before.quality_tolerance = 0.0125
        before.quality_profile_file = "quality.pbtxt"
        self.assertEqual(after, before)
        with open(os.path.join(model_dir, "quality.pbtxt")) as f:
            self.assertEqual(f.read(), text)
        # Applying again (no default_steps left) changes nothing but the tolerance.
        r = P.apply_to_model_dir(model_dir, "tiny", text, 0.02)
        self.assertEqual(r["previous_default_steps"], 0)
        self.assertEqual(r["previous_tolerance"], 0.0125)

    def test_apply_refuses_another_models_folder_and_disallowed_solvers(self):
        model_dir = os.path.join(self.dir, "m")
        os.makedirs(model_dir)
        with open(os.path.join(model_dir, "config.pbtxt"), "w") as f:
            f.write('name: "m"\ntask: CLASSIFICATION\nsteps { min: 1 max: 4 default_steps: 2 }\nsolvers: EULER\n')
        text = P.profile_text(P.profile_message("accuracy", self.points()))
        with self.assertRaises(P.ProfileError) as e:
            P.apply_to_model_dir(model_dir, "other", text, 0.01)
        self.assertIn("configures model 'm'", str(e.exception))
        with self.assertRaises(P.ProfileError) as e:
            P.apply_to_model_dir(model_dir, "m", text, 0.01)  # the profile has HEUN points
        self.assertIn("HEUN", str(e.exception))
        self.assertFalse(os.path.exists(os.path.join(model_dir, "quality.pbtxt")))  # nothing written


class TerminalStream(io.StringIO):
    """What a terminal looks like to Progress: a stream whose isatty() is true."""

    def isatty(self):
        return True


BAR = re.compile(r"^profiling m \[(#*)(\.*)\] +(\d+)% (\d+)/(\d+) points (.*), \d+s elapsed, ~-?\d+s left$")


class ProgressBar(unittest.TestCase):
    """Progress(total_calls, total_points, label, stream): the percentage counts calls, the
    points count finished (solver, steps) points."""

    def run_points(self, stream, points=3, calls_per_point=2):
        progress = P.Progress(points * calls_per_point, points, "profiling m", stream)
        for k in range(1, points + 1):
            for _ in range(calls_per_point):
                progress.call("EULER x %d" % k)
            progress.point("EULER x %d: accuracy 0.%d" % (k, k))
        progress.close()
        return stream.getvalue()

    def parse(self, bar):
        m = BAR.match(bar)
        self.assertIsNotNone(m, repr(bar))
        filled, empty, percent, done, total, what = m.groups()
        self.assertEqual(len(filled) + len(empty), 30, bar)
        return len(filled), int(percent), int(done), int(total), what

    def test_a_log_gets_one_line_per_point_with_count_and_percentage(self):
        out = self.run_points(io.StringIO())
        self.assertNotIn("\r", out)
        self.assertNotIn("\x1b", out)
        lines = out.split("\n")
        self.assertEqual(lines[-1], "")  # every line ends; close() adds nothing
        lines = lines[:-1]
        self.assertEqual(len(lines), 3)
        # 2 of 6 calls = 33% (10 of 30 marks), 4 of 6 = 66% (20), 6 of 6 = 100% (30)
        want = [(10, 33, 1, "EULER x 1: accuracy 0.1"), (20, 66, 2, "EULER x 2: accuracy 0.2"),
                (30, 100, 3, "EULER x 3: accuracy 0.3")]
        for line, (filled, percent, done, what) in zip(lines, want):
            self.assertEqual(self.parse(line), (filled, percent, done, 3, what))

    def test_the_percentage_counts_calls_not_points(self):
        stream = io.StringIO()
        progress = P.Progress(8, 2, "profiling m", stream)
        for _ in range(3):
            progress.call("EULER x 1")
        self.assertEqual(stream.getvalue(), "")  # a log gets nothing between points
        progress.point("EULER x 1: recall@1 0.5")
        self.assertEqual(self.parse(stream.getvalue().rstrip("\n"))[:4], (int(round(30 * 3 / 8)), 37, 1, 2))

    def test_a_terminal_is_redrawn_in_place_and_ends_at_every_point_done(self):
        stream = TerminalStream()
        out = self.run_points(stream)
        self.assertTrue(out.startswith("\r\x1b[K"), repr(out[:20]))
        self.assertTrue(out.endswith("\n"))
        self.assertEqual(out.count("\n"), 1)  # one line, ended by close()
        frames = out[:-1].split("\r\x1b[K")[1:]
        self.assertEqual(len(frames), 3 * 2 + 3)  # every call and every point redraws
        parsed = [self.parse(f) for f in frames]
        # after each call: the calls so far, the points finished before it
        self.assertEqual([p[1:4] for p in parsed[:3]], [(16, 0, 3), (33, 0, 3), (33, 1, 3)])
        self.assertEqual(parsed[0][4], "EULER x 1")
        self.assertEqual(parsed[2][4], "EULER x 1: accuracy 0.1")
        # the bar's last state: every call and every point
        self.assertEqual(parsed[-1], (30, 100, 3, 3, "EULER x 3: accuracy 0.3"))

    def test_a_terminal_without_calls_writes_nothing_until_close(self):
        stream = TerminalStream()
        P.Progress(0, 0, "profiling m", stream).close()
        self.assertEqual(stream.getvalue(), "\n")

    def test_the_default_stream_is_stderr(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            progress = P.Progress(1, 1, "profiling m")
            progress.call("EULER x 1")
            progress.point("EULER x 1: accuracy 1.0")
            progress.close()
        self.assertEqual(self.parse(err.getvalue().rstrip("\n"))[:4], (30, 100, 1, 1))


if __name__ == "__main__":
    unittest.main()
