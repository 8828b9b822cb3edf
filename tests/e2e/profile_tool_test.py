#!/usr/bin/env python3
"""End to end: `python3 -m odeserve_models profile` over real gRPC against the real server on the
test model repository.

    /usr/bin/python3 tests/e2e/profile_tool_test.py BINARY TEST_REPOSITORY

The test starts the server (models/odeserve_models/served.py, a free port, metrics off), writes
small JSONL files, runs the tool as a subprocess from models/ and checks: quality.pbtxt parses and
has a point for every (solver, steps, metric) asked for, values in [0, 1]; the printed
recommendation is the default_steps rule applied to the written points; --apply on a copy of the
classifier's folder gives a config.pbtxt that the protobuf parser reads with quality_profile_file
set and no default_steps, and that the server loads and follows (GetModel's default_steps_source
is "profile" and its default_steps the printed recommendation); a label the model lacks is
refused naming the line.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = os.path.join(ROOT, "models")
sys.path.insert(0, MODELS)

from google.protobuf import text_format  # noqa: E402

from odeserve_models import profile as P  # noqa: E402
from odeserve_models.served import Served  # noqa: E402

BINARY = REPOSITORY = None
CLASSIFIER = "tiny-classifier"
SAMPLE = os.path.join(ROOT, "tests", "fixtures", "descriptions-sample.txt")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sample_lines(n, skip=0):
    with open(SAMPLE, encoding="utf-8") as f:
        lines = [l.strip() for l in f if l.strip()]
    return lines[skip:skip + n]


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def run_profile(args):
    cmd = ["/usr/bin/python3", "-m", "odeserve_models", "profile"] + args
    p = subprocess.run(cmd, cwd=MODELS, capture_output=True, text=True, timeout=240)
    sys.stdout.write("$ %s\n-> exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout,
                                                   "".join("  stderr: " + l + "\n" for l in p.stderr.splitlines()[-8:])))
    return p


def printed_recommendation(stdout):
    m = re.search(r"^recommended default_steps: (\d+) ", stdout, re.M)
    return int(m.group(1)) if m else None


def rule(points, primary, tolerance):
    """The default_steps rule, written out again: the fewest Euler steps whose primary metric is at
    least best - tolerance."""
    euler = {p.steps: p.value for p in points if p.solver == P.load_protos()[0].EULER and p.metric == primary}
    best = max(euler.values())
    return min(s for s, v in euler.items() if not (v < best - tolerance))


class ProfileTool(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="odeserve-profile-e2e-")
        cls.port = free_port()
        cls.served = Served(start=BINARY, model_repository=REPOSITORY, grpc_port=cls.port, metrics_port=-1,
                            log_path=os.path.join(cls.tmp, "server.log"))
        cls.served.__enter__()
        cls.pb = cls.served.pb
        cls.mc = P.load_protos()[2]
        cls.models = cls.served.models
        ready = {n: m for n, m in cls.models.items() if m.state == cls.pb.READY}
        if CLASSIFIER not in ready:
            raise RuntimeError("%s is not READY: %s" % (CLASSIFIER, {n: cls.pb.ModelState.Name(m.state) for n, m in cls.models.items()}))
        embedders = sorted(n for n, m in ready.items() if m.task == cls.pb.EMBEDDING)
        cls.embedder = "tiny-sharebert" if "tiny-sharebert" in embedders else (embedders[0] if embedders else None)

    @classmethod
    def tearDownClass(cls):
        cls.served.__exit__(None, None, None)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def address(self):
        return "localhost:%d" % self.port

    def parse_profile(self, path):
        with open(path, encoding="utf-8") as f:
            return text_format.Parse(f.read(), self.mc.QualityProfile())

    def check_points(self, profile, primary, solvers, steps, metrics, dataset):
        self.assertEqual(profile.primary_metric, primary)
        got = [(self.pb.Solver.Name(p.solver), p.steps, p.metric) for p in profile.points]
        want = [(s, n, m) for s in solvers for n in steps for m in metrics]
        self.assertEqual(sorted(got), sorted(want))  # every point asked for, once
        for p in profile.points:
            self.assertTrue(0.0 <= p.value <= 1.0, p)
            self.assertEqual(p.dataset, dataset)

    def test_classifier_profile_apply_and_the_server_follows_it(self):
        info = self.models[CLASSIFIER]
        labels = list(info.labels)
        texts = sample_lines(12)
        data = os.path.join(self.tmp, "sections.jsonl")
        write_jsonl(data, [{"text": t, "label": labels[i % len(labels)], "id": i} for i, t in enumerate(texts)])
        # --apply works on a copy of the classifier's folder, in a repository of its own.
        repo = os.path.join(self.tmp, "repo")
        model_dir = os.path.join(repo, CLASSIFIER)
        shutil.copytree(os.path.join(REPOSITORY, CLASSIFIER), model_dir)
        with open(os.path.join(model_dir, "config.pbtxt"), encoding="utf-8") as f:
            original = text_format.Parse(f.read(), self.mc.ModelConfig())
        out = os.path.join(self.tmp, "classifier-quality.pbtxt")

        p = run_profile(["--address", self.address(), "--model", CLASSIFIER, "--data", data, "--out", out,
                         "--apply", model_dir])
        self.assertEqual(p.returncode, 0, p.stderr)

        # Default solvers and steps: everything the model allows.
        solvers = [self.pb.Solver.Name(s) for s in info.solvers] or ["EULER"]
        steps = list(range(info.min_steps, info.max_steps + 1))
        profile = self.parse_profile(out)
        self.check_points(profile, "accuracy", solvers, steps, ["accuracy", "macro_f1"], "sections.jsonl (12)")
        for pt in profile.points:  # accuracy over 12 items is a multiple of 1/12
            if pt.metric == "accuracy":
                self.assertAlmostEqual(pt.value * 12, round(pt.value * 12), places=9)

        # The applied config: parsed by protobuf, profile file and tolerance set, no default_steps,
        # nothing else changed.
        with open(os.path.join(model_dir, "config.pbtxt"), encoding="utf-8") as f:
            applied_text = f.read()
        applied = text_format.Parse(applied_text, self.mc.ModelConfig())
        self.assertEqual(applied.quality_profile_file, "quality.pbtxt")
        self.assertNotIn("default_steps", applied_text)
        self.assertEqual(applied.steps.default_steps, 0)
        self.assertGreater(applied.quality_tolerance, 0)
        expected = self.mc.ModelConfig()
        expected.CopyFrom(original)
        expected.steps.default_steps = 0
        expected.quality_tolerance = applied.quality_tolerance
        expected.quality_profile_file = "quality.pbtxt"
        self.assertEqual(applied, expected)
        self.assertEqual(self.parse_profile(os.path.join(model_dir, "quality.pbtxt")), profile)
        # auto tolerance: the unresolvable gap of 12 items (5 of 12).
        self.assertAlmostEqual(applied.quality_tolerance, 5 / 12, places=6)

        # The printed recommendation is the rule applied to the written points and tolerance.
        rec = printed_recommendation(p.stdout)
        self.assertIsNotNone(rec, p.stdout)
        self.assertEqual(rec, rule(profile.points, "accuracy", applied.quality_tolerance))
        self.assertRegex(p.stdout, r"gain from 1 step to the trained depth \(%d Euler steps\): accuracy" % info.trained_depth)
        self.assertIn("restart the server", p.stdout)

        # The server loads the applied folder (--start path of the tool), reports that its default
        # comes from the profile, and takes the recommended default from it.
        out2 = os.path.join(self.tmp, "classifier-quality-2.pbtxt")
        p2 = run_profile(["--start", BINARY, "--model_repository", repo, "--model", CLASSIFIER, "--data", data,
                          "--steps", "1-2", "--solvers", "EULER", "--out", out2])
        self.assertEqual(p2.returncode, 0, p2.stderr)
        self.check_points(self.parse_profile(out2), "accuracy", ["EULER"], [1, 2], ["accuracy", "macro_f1"],
                          "sections.jsonl (12)")
        m = re.search(r"\(default (\d+)(?: from (\w+))?\)", p2.stdout)
        self.assertIsNotNone(m, p2.stdout)
        # GetModel always reports default_steps_source: a missing one is a server regression.
        self.assertIsNotNone(m.group(2), "GetModel did not report default_steps_source:\n" + p2.stdout)
        self.assertEqual(m.group(2), "profile", p2.stdout)
        self.assertEqual(int(m.group(1)), rec, p2.stdout)
        # The same measurements as the first server's (exact steps and solver, deterministic model).
        first = {(pt.solver, pt.steps, pt.metric): pt.value for pt in profile.points}
        for pt in self.parse_profile(out2).points:
            self.assertAlmostEqual(pt.value, first[(pt.solver, pt.steps, pt.metric)], places=9)

    def test_embedding_retrieval_profile(self):
        if self.embedder is None:
            self.skipTest("no READY embedding model in the test repository")
        lines = sample_lines(8, skip=20)
        data = os.path.join(self.tmp, "pairs.jsonl")
        write_jsonl(data, [{"q": " ".join(l.split()[:6]), "doc": l} for l in lines])
        out = os.path.join(self.tmp, "embed-quality.pbtxt")
        info = self.models[self.embedder]
        solvers = (["HEUN"] if self.pb.HEUN in info.solvers else []) + ["EULER"]
        steps = [s for s in (1, 2, 4) if info.min_steps <= s <= info.max_steps]
        p = run_profile(["--address", self.address(), "--model", self.embedder, "--data", data, "--out", out,
                         "--query_field", "q", "--document_field", "doc", "--steps", ",".join(map(str, steps)),
                         "--solvers", ",".join(s.lower() for s in solvers), "--quality_tolerance", "0.05"])
        self.assertEqual(p.returncode, 0, p.stderr)
        profile = self.parse_profile(out)
        self.check_points(profile, "recall@1", solvers, steps, ["recall@1", "recall@10"], "pairs.jsonl (8)")
        for pt in profile.points:
            if pt.metric == "recall@10":
                self.assertEqual(pt.value, 1.0)  # 8 documents: every match is in the top 10
        self.assertEqual(printed_recommendation(p.stdout), rule(profile.points, "recall@1", 0.05))

    def test_data_errors_are_refused_naming_the_line(self):
        labels = list(self.models[CLASSIFIER].labels)
        data = os.path.join(self.tmp, "bad-label.jsonl")
        write_jsonl(data, [{"text": "a tool", "label": labels[0]}, {"text": "a game", "label": labels[-1]},
                           {"text": "a recipe", "label": "cooking-not-a-label"}])
        out = os.path.join(self.tmp, "never.pbtxt")
        p = run_profile(["--address", self.address(), "--model", CLASSIFIER, "--data", data, "--out", out])
        self.assertEqual(p.returncode, 2)
        self.assertIn("bad-label.jsonl:3: label 'cooking-not-a-label'", p.stderr)
        self.assertFalse(os.path.exists(out))

        data = os.path.join(self.tmp, "bad-json.jsonl")
        with open(data, "w") as f:
            f.write('{"text": "a tool", "label": "%s"}\n{"text": "oops"\n' % labels[0])
        p = run_profile(["--address", self.address(), "--model", CLASSIFIER, "--data", data, "--out", out])
        self.assertEqual(p.returncode, 2)
        self.assertIn("bad-json.jsonl:2: not valid JSON", p.stderr)

        data = os.path.join(self.tmp, "good.jsonl")
        write_jsonl(data, [{"text": "a tool", "label": labels[0]}])
        p = run_profile(["--address", self.address(), "--model", CLASSIFIER, "--data", data, "--out", out,
                         "--steps", "1-99"])
        self.assertEqual(p.returncode, 2)
        self.assertIn("outside the model's step range", p.stderr)
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.stderr.write("usage: profile_tool_test.py BINARY TEST_REPOSITORY [unittest options]\n")
        sys.exit(2)
    BINARY, REPOSITORY = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
