#!/usr/bin/env python3
"""Serving an imported ALBERT checkpoint, end to end over real gRPC.

Synthetic Hugging Face checkpoints (random weights, HF key names, an ALBERT-layout spiece.model)
are imported with `python3 -m odeserve_models import-albert`, served by the real server binary,
and compared with a reference forward written in plain PyTorch from the published architecture
(tests/models/albert_reference.py, independent of the importer's module):
- served Embed (mean, cls, pooler) and Classify at n = L and n < L equal the reference (1e-4);
- the server's token ids (odeserve-tokenize) equal the Python AlbertTokenizer reference on a
  multilingual list, digit-comma re-splits included, for the default tokenizer_config.json and
  for one with every option flipped (keep_accents, do_lower_case, remove_space), whose served
  embeddings also equal the reference fed those ids;
- a model without a profile reports so and runs its trained depth by default; with a profile
  and no default_steps in its config, a call without steps runs the profile's cheapest point.

usage: albert_import_test.py SERVER_BINARY TOKENIZE_BINARY
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "models")
sys.path.insert(0, MODELS)  # tests only: the package is run from models/ by users
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))

import torch  # noqa: E402

from albert_reference import albert_reference  # noqa: E402
from odeserve_models.albert import synthetic  # noqa: E402
from odeserve_models.albert.tokenization import AlbertTokenizerReference, preprocess_text  # noqa: E402
from odeserve_models.served import Served  # noqa: E402

SERVER = TOKENIZE = ""
LAYERS = 4
TEXTS = [
    "A tool to compress files",
    "Crème brûlée für Straße und Ärger",
    "  whitespace\t\truns \n and\u00a0nbsp\u3000ideographic  ",
    "``quoted'' text with ''double'' quotes",
    "版本 1998, 2,5 and 10,000 items",
    "日本語のテキスト、中文文本",
    "emoji 😀 and ÀÉÎÕÜ accents",
    "İstanbul ΟΔΟΣ Ǆ",
    "x" * 300,  # longer than max_position_embeddings: truncated
]
# Texts whose ids the server must match, including ones the server refuses to serve (no pieces).
TOKENIZER_TEXTS = TEXTS + ["", "   ", "\u0301\u0300", "1,2,3, 45, 6789,", "Version 3, 4,5,"]
# tokenizer_config.json with every option the importer reads set against Hugging Face's default
# (do_lower_case true, keep_accents false, remove_space true).
NON_DEFAULT_TOKENIZER = dict(do_lower_case=False, keep_accents=True, remove_space=False)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def import_albert(args):
    proc = subprocess.run([sys.executable, "-m", "odeserve_models", "import-albert"] + args, cwd=MODELS,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError("import-albert %s failed:\n%s%s" % (args, proc.stdout, proc.stderr))


class ImportedAlbert(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="odeserve-albert-")
        repo = os.path.join(cls.tmp, "repository")
        os.makedirs(repo)
        cls.checkpoints = {}
        embed_ckpt = os.path.join(cls.tmp, "albert-embed")
        class_ckpt = os.path.join(cls.tmp, "albert-classify")
        options_ckpt = os.path.join(cls.tmp, "albert-options")
        tokenizer_config = dict(NON_DEFAULT_TOKENIZER, bos_token="[CLS]", eos_token="[SEP]", unk_token="<unk>",
                                sep_token="[SEP]", pad_token="<pad>", cls_token="[CLS]", mask_token="[MASK]",
                                tokenizer_class="AlbertTokenizer")
        # What was written (config and tensors as stored), for the reference forward.
        cls.written = {
            embed_ckpt: synthetic.write_synthetic_checkpoint(embed_ckpt, format="safetensors", layers=LAYERS),
            class_ckpt: synthetic.write_synthetic_checkpoint(class_ckpt, format="bin", task="classification",
                                                             layers=LAYERS, seed=1),
            options_ckpt: synthetic.write_synthetic_checkpoint(options_ckpt, format="safetensors", layers=LAYERS,
                                                               seed=2, tokenizer_config=tokenizer_config),
        }
        cls.tokenizer_options = {embed_ckpt: {}, class_ckpt: {}, options_ckpt: NON_DEFAULT_TOKENIZER}
        for name, ckpt, extra in [
            ("albert-mean", embed_ckpt, ["--task", "embedding", "--pooling", "mean"]),
            ("albert-cls", embed_ckpt, ["--task", "embedding", "--pooling", "cls"]),
            ("albert-pooler", embed_ckpt, ["--task", "embedding", "--pooling", "pooler"]),
            ("albert-classify", class_ckpt, ["--task", "classification"]),
            ("albert-profiled", embed_ckpt, ["--task", "embedding"]),
            ("albert-options", options_ckpt, ["--task", "embedding", "--pooling", "mean"]),
        ]:
            import_albert([ckpt, os.path.join(repo, name)] + extra)
            cls.checkpoints[name] = ckpt
        # A measured profile in which 2 steps is the cheapest point within the tolerance of the best.
        profiled = os.path.join(repo, "albert-profiled")
        with open(os.path.join(profiled, "quality.pbtxt"), "w") as f:
            f.write('primary_metric: "recall@1"\n')
            for steps, value in [(1, 0.50), (2, 0.795), (3, 0.80), (4, 0.79), (8, 0.80)]:
                f.write('points { solver: EULER steps: %d metric: "recall@1" value: %.3f dataset: "t (10)" }\n'
                        % (steps, value))
        with open(os.path.join(profiled, "config.pbtxt"), "a") as f:
            f.write('quality_profile_file: "quality.pbtxt"\nquality_tolerance: 0.01\n')
        cls.repo = repo
        cls.served = Served(start=SERVER, model_repository=repo, grpc_port=free_port(), metrics_port=-1,
                            log_path=os.path.join(cls.tmp, "server.log"))
        cls.served.__enter__()
        cls.pb, cls.stub = cls.served.pb, cls.served.stub

    @classmethod
    def tearDownClass(cls):
        cls.served.__exit__(None, None, None)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def tokenizer(self, name):
        """The Python reference tokenizer of `name`'s checkpoint, with its tokenizer_config options."""
        ckpt = self.checkpoints[name]
        return AlbertTokenizerReference(os.path.join(ckpt, "spiece.model"), **self.tokenizer_options[ckpt])

    def served_ids(self, name, texts):
        """odeserve-tokenize on the imported model folder: the ids the server feeds the model."""
        lines = "".join(t.replace("\\", "\\\\").replace("\n", "\\n") + "\n" for t in texts)
        out = subprocess.run([TOKENIZE, os.path.join(self.repo, name)], input=lines, capture_output=True, text=True,
                             check=True).stdout
        return [[int(i) for i in line.split()] for line in out.splitlines()]

    def reference(self, name, texts, n_steps):
        ckpt = self.checkpoints[name]
        written = self.written[ckpt]
        tok = self.tokenizer(name)
        x, mask = tok.batch(texts, written["config"]["max_position_embeddings"])
        return albert_reference(written["state_dict"], written["config"], x, mask, n_steps=n_steps)

    def test_every_model_loaded(self):
        states = {n: self.pb.ModelState.Name(m.state) for n, m in self.served.models.items()}
        self.assertEqual(states, {n: "READY" for n in self.checkpoints}, states)

    def test_served_embeddings_equal_the_reference_at_and_below_the_trained_depth(self):
        texts = TEXTS
        for name, key in [("albert-mean", "mean"), ("albert-cls", "cls"), ("albert-pooler", "pooler")]:
            for steps in (LAYERS, 2, 1):
                with self.subTest(model=name, steps=steps):
                    request = self.pb.EmbedRequest(model=name, inputs=texts, truncate=True)
                    request.compute.steps = steps
                    request.compute.solver = self.pb.EULER
                    response = self.stub.Embed(request, timeout=60)
                    self.assertEqual(response.report.steps, steps)
                    served = torch.tensor([list(e.values) for e in response.embeddings], dtype=torch.float64)
                    expected = self.reference(name, texts, steps)[key]
                    self.assertEqual(tuple(served.shape), tuple(expected.shape))
                    self.assertLess((served - expected).abs().max().item(), 1e-4)
        # Fewer steps are a different solve, not the same numbers: the comparison can fail.
        at_l = self.reference("albert-mean", texts[:1], LAYERS)["mean"]
        at_1 = self.reference("albert-mean", texts[:1], 1)["mean"]
        self.assertGreater((at_l - at_1).abs().max().item(), 1e-2)

    def test_served_classification_equals_the_reference(self):
        labels = list(self.served.models["albert-classify"].labels)
        self.assertEqual(labels, ["negative", "neutral", "positive"])
        for steps in (LAYERS, 1):
            request = self.pb.ClassifyRequest(model="albert-classify", inputs=TEXTS, top_k=len(labels),
                                              truncate=True)
            request.compute.steps = steps
            response = self.stub.Classify(request, timeout=60)
            expected = torch.softmax(self.reference("albert-classify", TEXTS, steps)["logits"], dim=-1)
            for row, result in enumerate(response.results):
                served = {s.label: s.score for s in result.labels}
                for j, label in enumerate(labels):
                    self.assertAlmostEqual(served[label], expected[row, j].item(), delta=1e-4,
                                           msg="%s row %d at %d steps" % (label, row, steps))

    def test_server_tokenization_equals_the_python_reference(self):
        served = self.served_ids("albert-mean", TOKENIZER_TEXTS)
        tok = self.tokenizer("albert-mean")
        for text, ids in zip(TOKENIZER_TEXTS, served):
            self.assertEqual(ids, tok.encode(text, 64), repr(text))
        self.assertEqual(len(served), len(TOKENIZER_TEXTS))
        # The list exercises the digit-comma re-split: without it some ids would differ.
        resplit = [t for t in TOKENIZER_TEXTS
                   if tok.sp.encode(preprocess_text(t), out_type=str) != tok.tokenize(t)]
        self.assertTrue(resplit, "no text in the list has a digit-comma piece")
        # Text that normalizes to nothing is [CLS] [SEP], as the Hugging Face tokenizer gives.
        self.assertEqual(served[TOKENIZER_TEXTS.index("\u0301\u0300")], [tok.cls_id, tok.sep_id])

    def test_non_default_tokenizer_options_are_followed(self):
        """keep_accents, do_lower_case and remove_space from tokenizer_config.json, all flipped: the
        config says so, the server's ids equal the reference's with the same options (and differ
        from the defaults' where the options matter), and the served embeddings equal the
        reference forward on those ids."""
        with open(os.path.join(self.repo, "albert-options", "config.pbtxt"), encoding="utf-8") as f:
            config = f.read()
        for line in ("collapse_whitespace: false", "strip_accents: false", "lowercase: false",
                     "normalize_quotes: true", "split_digit_comma: true"):
            self.assertIn(line, config)
        tok = self.tokenizer("albert-options")
        self.assertEqual((tok.do_lower_case, tok.keep_accents, tok.remove_space), (False, True, False))
        served = self.served_ids("albert-options", TOKENIZER_TEXTS)
        self.assertEqual(len(served), len(TOKENIZER_TEXTS))
        for text, ids in zip(TOKENIZER_TEXTS, served):
            self.assertEqual(ids, tok.encode(text, 64), repr(text))
        # The options change the ids of accented, capitalised and whitespace-run texts: a server
        # that ignored them would fail the comparison above.
        spiece = os.path.join(self.checkpoints["albert-options"], "spiece.model")
        default = AlbertTokenizerReference(spiece)
        for options, text in [(dict(keep_accents=True), "Crème brûlée"), (dict(do_lower_case=False), "ABC Def"),
                              (dict(remove_space=False), "  a  b  ")]:
            one = AlbertTokenizerReference(spiece, **options)
            self.assertNotEqual(one.preprocess(text), default.preprocess(text), options)
        differ = [t for t in TOKENIZER_TEXTS if tok.encode(t, 64) != default.encode(t, 64)]
        self.assertGreaterEqual(len(differ), 3, differ)
        # Served outputs follow the same ids: Embed at n = L and n < L equals the reference forward.
        for steps in (LAYERS, 1):
            request = self.pb.EmbedRequest(model="albert-options", inputs=TEXTS, truncate=True)
            request.compute.steps = steps
            request.compute.solver = self.pb.EULER
            response = self.stub.Embed(request, timeout=60)
            self.assertEqual(response.report.steps, steps)
            got = torch.tensor([list(e.values) for e in response.embeddings], dtype=torch.float64)
            expected = self.reference("albert-options", TEXTS, steps)["mean"]
            self.assertLess((got - expected).abs().max().item(), 1e-4, "at %d steps" % steps)

    def test_a_model_without_a_profile_runs_its_trained_depth_and_says_so(self):
        info = self.stub.GetModel(self.pb.GetModelRequest(name="albert-mean"), timeout=10).model
        self.assertFalse(info.quality_profile_measured)
        self.assertEqual(info.default_steps_source, "trained_depth")
        self.assertEqual(info.default_steps, LAYERS)
        self.assertEqual((info.min_steps, info.max_steps, info.trained_depth), (1, 2 * LAYERS, LAYERS))
        # No deadline: a gRPC deadline is a latency budget, which buys the most steps that fit.
        response = self.stub.Embed(self.pb.EmbedRequest(model="albert-mean", inputs=["files"]))
        self.assertEqual(response.report.steps, LAYERS)
        self.assertEqual(response.report.step_choice, self.pb.MODEL_DEFAULT)
        budgeted = self.stub.Embed(self.pb.EmbedRequest(model="albert-mean", inputs=["files"]), timeout=30)
        self.assertEqual(budgeted.report.steps, 2 * LAYERS)
        self.assertEqual(budgeted.report.step_choice, self.pb.BUDGET)

    def test_a_profiled_model_defaults_to_the_cheapest_point_within_tolerance(self):
        info = self.stub.GetModel(self.pb.GetModelRequest(name="albert-profiled"), timeout=10).model
        self.assertTrue(info.quality_profile_measured)
        self.assertEqual(info.default_steps_source, "profile")
        self.assertEqual(info.default_steps, 2)
        response = self.stub.Embed(self.pb.EmbedRequest(model="albert-profiled", inputs=["files"]))
        self.assertEqual(response.report.steps, 2)
        self.assertEqual(response.report.step_choice, self.pb.MODEL_DEFAULT)


if __name__ == "__main__":
    SERVER, TOKENIZE = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
