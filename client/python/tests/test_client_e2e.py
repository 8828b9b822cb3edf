"""odeserve_client against the real server (build/server/odeserve on the test model repository)
over loopback gRPC: every method, budgets, exact steps and solvers, errors, bearer tokens, TLS.

The server and repository come from $ODESERVE_BINARY and $ODESERVE_TEST_REPOSITORY (ctest sets
them), else build/ of this checkout; without either the tests are skipped.
"""
import contextlib
import datetime
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _support  # noqa: E402  (sys.path and the stub folder first)

import grpc  # noqa: E402

from odeserve_client import Client, OdeserveError, Solver, _convert  # noqa: E402

EMBEDDER, CLASSIFIER, TRANSLATOR = "tiny-sharebert", "tiny-classifier", "tiny-translator"
TEST_MODELS = {"tiny-albert", "tiny-classifier", "tiny-eelbert", "tiny-lexical", "tiny-probe", "tiny-sharebert",
               "tiny-translator"}
IMPOSSIBLE = datetime.timedelta(microseconds=1)  # no model runs in 1 us


class ServedTest(unittest.TestCase):
    """One plain server for every test of the class."""

    @classmethod
    def setUpClass(cls):
        cls.server = _support.ServerProcess()
        cls.addClassCleanup(cls.server.stop)
        cls.client = Client(cls.server.address, timeout=60)  # a deadline: it counts as a 60 s budget
        cls.addClassCleanup(cls.client.close)

    def assertCode(self, code, call, *args, **kwargs):
        with self.assertRaises(OdeserveError) as caught:
            call(*args, **kwargs)
        self.assertIs(caught.exception.code, code, str(caught.exception))
        self.assertTrue(caught.exception.message)
        return caught.exception


class EmbedTest(ServedTest):
    def test_three_lines(self):
        # The README's example, against the test embedder.
        c = Client(self.server.address)
        e = c.embed(["a", "b"], model=EMBEDDER, budget=0.010)
        dim = c.model(EMBEDDER).embedding_dimension
        self.assertGreater(dim, 0)
        self.assertEqual(e.embeddings.shape, (2, dim))
        self.assertEqual(str(e.embeddings.dtype), "float32")
        self.assertEqual(e.model, EMBEDDER)
        self.assertEqual(e.report.budget, datetime.timedelta(milliseconds=10))
        c.close()

    def test_single_string_is_one_input(self):
        e = self.client.embed("a tool to compress files", model=EMBEDDER)
        self.assertEqual(e.embeddings.shape[0], 1)
        self.assertGreater(e.report.tokens, 0)

    def test_normalize(self):
        texts = ["a tool to compress files", "ein Werkzeug", "library"]
        normalized = self.client.embed(texts, model=EMBEDDER, normalize=True, steps=2).embeddings
        raw = self.client.embed(texts, model=EMBEDDER, steps=2).embeddings
        for row, raw_row in zip(normalized, raw):
            self.assertAlmostEqual(float((row.astype("float64") ** 2).sum()), 1.0, places=4)
            norm = math.sqrt(float((raw_row.astype("float64") ** 2).sum()))
            for a, b in zip(row, raw_row / norm):
                self.assertAlmostEqual(float(a), float(b), places=4)

    def test_lists_without_numpy(self):
        with_numpy = self.client.embed(["a", "b"], model=EMBEDDER, steps=1).embeddings
        with mock.patch.object(_convert, "_np", None):
            lists = self.client.embed(["a", "b"], model=EMBEDDER, steps=1).embeddings
        self.assertIsInstance(lists, list)
        self.assertEqual(len(lists), 2)
        self.assertIsInstance(lists[0][0], float)
        for row, array_row in zip(lists, with_numpy):
            for a, b in zip(row, array_row):
                self.assertAlmostEqual(a, float(b), places=5)

    def test_exact_steps_and_solver(self):
        for solver, name, evaluations in (("heun", "HEUN", 2), (Solver.RK4, "RK4", 4), ("Euler", "EULER", 1)):
            r = self.client.embed("x y z", model=EMBEDDER, steps=3, solver=solver).report
            self.assertEqual((r.steps, r.solver, r.field_evaluations, r.step_choice),
                             (3, name, 3 * evaluations, "REQUESTED"), solver)
            trained_depth = self.client.model(EMBEDDER).trained_depth
            self.assertAlmostEqual(r.step_size, trained_depth / 3, places=5)

    def test_truncate(self):
        long_text = " ".join(["word"] * 500)
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.embed, long_text, model=EMBEDDER)
        r = self.client.embed(long_text, model=EMBEDDER, truncate=True).report
        self.assertEqual(r.truncated_inputs, 1)


class BudgetTest(ServedTest):
    def check_budgeted(self, budget, expected):
        r = self.client.embed(["a", "b"], model=EMBEDDER, budget=budget).report
        self.assertTrue(r.budget_set)
        self.assertEqual(r.budget, expected)
        self.assertIn(r.step_choice, ("BUDGET", "BUDGET_FLOOR"))
        self.assertGreater(r.total_time, datetime.timedelta(0))
        return r

    def test_budget_as_timedelta(self):
        self.check_budgeted(datetime.timedelta(milliseconds=250), datetime.timedelta(milliseconds=250))

    def test_budget_as_float_seconds(self):
        self.check_budgeted(0.25, datetime.timedelta(milliseconds=250))
        self.check_budgeted(1, datetime.timedelta(seconds=1))

    def test_serve_floor_and_min_steps(self):
        r = self.client.embed("a", model=EMBEDDER, budget=IMPOSSIBLE, min_steps=3, on_budget_miss="serve_floor").report
        self.assertEqual((r.step_choice, r.budget_met, r.steps), ("BUDGET_FLOOR", False, 3))
        self.assertEqual(r.budget, IMPOSSIBLE)

    def test_refuse(self):
        error = self.assertCode(grpc.StatusCode.DEADLINE_EXCEEDED, self.client.embed, "a", model=EMBEDDER,
                                budget=IMPOSSIBLE, on_budget_miss="REFUSE")
        self.assertIn("budget", error.message)

    def test_client_deadline_is_the_budget_without_one(self):
        r = self.client.embed("a", model=EMBEDDER).report  # the client's 60 s timeout
        self.assertTrue(r.budget_set)
        # (gRPC sends the timeout in coarse units, rounded up: the server may see a little more)
        self.assertLessEqual(r.budget, datetime.timedelta(seconds=61))
        self.assertGreater(r.budget, datetime.timedelta(seconds=50))
        with Client(self.server.address) as no_deadline:
            r = no_deadline.embed("a", model=EMBEDDER).report
        self.assertEqual((r.budget_set, r.budget, r.step_choice), (False, None, "MODEL_DEFAULT"))


class ClassifyTest(ServedTest):
    def test_top_k(self):
        labels = self.client.model(CLASSIFIER).labels
        result = self.client.classify(["python bindings", "arcade game", "compression library"], model=CLASSIFIER,
                                      top_k=3)
        self.assertEqual(len(result.labels), 3)
        for per_input in result.labels:
            self.assertEqual(len(per_input), 3)
            scores = [score for _, score in per_input]
            self.assertEqual(scores, sorted(scores, reverse=True))
            self.assertLessEqual(sum(scores), 1.0 + 1e-5)
            for label, score in per_input:
                self.assertIn(label, labels)
                self.assertTrue(0.0 <= score <= 1.0)
        self.assertEqual(result.report.batch_size >= 1, True)

    def test_default_top_1_and_cap(self):
        result = self.client.classify("python bindings", model=CLASSIFIER)
        self.assertEqual(len(result.labels), 1)
        self.assertEqual(len(result.labels[0]), 1)
        n_labels = len(self.client.model(CLASSIFIER).labels)
        capped = self.client.classify("python bindings", model=CLASSIFIER, top_k=1000)
        self.assertEqual(len(capped.labels[0]), n_labels)

    def test_budget_and_solver(self):
        r = self.client.classify("x", model=CLASSIFIER, steps=2, solver="rk4", budget=5.0).report
        self.assertEqual((r.steps, r.solver, r.field_evaluations, r.step_choice), (2, "RK4", 8, "REQUESTED"))
        self.assertEqual(r.budget, datetime.timedelta(seconds=5))


class TranslateTest(ServedTest):
    TEXTS = ["fast and lightweight web server", "development files"]

    def test_translate(self):
        t = self.client.translate(self.TEXTS, model=TRANSLATOR)
        self.assertEqual(len(t.translations), 2)
        self.assertEqual(len(t.scores), 2)
        for text, score in zip(t.translations, t.scores):
            self.assertIsInstance(text, str)
            self.assertLessEqual(score, 0.0)
        self.assertEqual(t.report.beam_size, 1)
        self.assertGreaterEqual(t.report.output_tokens, 2)  # at least one token per translation
        info = self.client.model(TRANSLATOR)
        self.assertEqual((t.report.steps, t.report.decoder_steps),
                         (info.default_steps, info.translation.default_decoder_steps))

    def test_options(self):
        t = self.client.translate(self.TEXTS, model=TRANSLATOR, steps=2, decoder_steps=3, beam_size=2,
                                  max_output_tokens=3, length_penalty=0.5)
        r = t.report
        self.assertEqual((r.steps, r.decoder_steps, r.beam_size, r.step_choice), (2, 3, 2, "REQUESTED"))
        self.assertLessEqual(r.output_tokens, 2 * 3)
        self.assertAlmostEqual(r.decoder_step_size, self.client.model(TRANSLATOR).translation.decoder_trained_depth / 3,
                               places=5)

    def test_budget(self):
        r = self.client.translate(self.TEXTS[0], model=TRANSLATOR, budget=datetime.timedelta(seconds=2)).report
        self.assertIn(r.step_choice, ("BUDGET", "BUDGET_FLOOR"))
        self.assertEqual(r.budget, datetime.timedelta(seconds=2))

    def test_stream_greedy(self):
        text = self.TEXTS[0]
        messages = list(self.client.translate_stream(text, model=TRANSLATOR, steps=2, decoder_steps=2))
        self.assertGreaterEqual(len(messages), 2)  # at least one token, then the final message
        finals = [m for m in messages if m.final]
        self.assertEqual(len(finals), 1)
        self.assertTrue(messages[-1].final)
        self.assertIsNotNone(messages[-1].report)
        self.assertTrue(all(m.report is None for m in messages[:-1]))
        self.assertTrue(all(m.index == 0 for m in messages))
        report = messages[-1].report
        self.assertEqual((report.steps, report.decoder_steps, report.beam_size), (2, 2, 1))
        # One message per generated token (the last token's text may come only in the final one).
        self.assertLessEqual(len([m for m in messages if not m.final]), report.output_tokens)
        self.assertGreaterEqual(len([m for m in messages if not m.final]), report.output_tokens - 1)
        unary = self.client.translate(text, model=TRANSLATOR, steps=2, decoder_steps=2)
        self.assertEqual(finals[0].text, unary.translations[0])
        self.assertAlmostEqual(finals[0].score, unary.scores[0], places=4)

    def test_stream_beam_sends_only_finals(self):
        messages = list(self.client.translate_stream(self.TEXTS, model=TRANSLATOR, beam_size=2))
        self.assertEqual(sorted(m.index for m in messages), [0, 1])
        self.assertTrue(all(m.final for m in messages))
        self.assertEqual(messages[-1].report.beam_size, 2)

    def test_stream_closed_early(self):
        with contextlib.closing(self.client.translate_stream(self.TEXTS, model=TRANSLATOR)) as stream:
            first = next(stream)
        self.assertIn(first.index, (0, 1))
        self.client.models()  # the channel still works

    def test_stream_errors_raise_from_the_iterator(self):
        stream = self.client.translate_stream("x", model="no-such-model")
        with self.assertRaises(OdeserveError) as caught:
            list(stream)
        self.assertIs(caught.exception.code, grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(OdeserveError) as caught:
            list(self.client.translate_stream("x", model=TRANSLATOR, decoder_steps=99))
        self.assertIs(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)


class ModelsTest(ServedTest):
    def test_models(self):
        models = self.client.models()
        self.assertEqual({m.name for m in models}, TEST_MODELS)
        by_name = {m.name: m for m in models}
        self.assertEqual(by_name[EMBEDDER].task, "EMBEDDING")
        self.assertEqual(by_name[CLASSIFIER].task, "CLASSIFICATION")
        self.assertEqual(by_name[TRANSLATOR].task, "TRANSLATION")
        self.assertTrue(all(m.state == "READY" for m in models))

    def test_model(self):
        info = self.client.model(EMBEDDER)
        self.assertEqual(info.name, EMBEDDER)
        self.assertEqual(info.solvers, ["EULER", "HEUN", "RK4"])
        self.assertLessEqual(info.min_steps, info.default_steps)
        self.assertLessEqual(info.default_steps, info.max_steps)
        self.assertIsNone(info.translation)
        self.assertIsNotNone(info.cost_model)
        self.assertIn(info.default_steps_source, ("config", "profile", "trained_depth"))
        translator = self.client.model(TRANSLATOR)
        self.assertEqual(translator.translation.max_beam_size, 4)
        self.assertEqual((translator.translation.source_language, translator.translation.target_language),
                         ("en", "de"))
        self.assertTrue(translator.quality_profile)
        self.assertEqual(translator.quality_profile[0].solver, "EULER")


class ErrorsTest(ServedTest):
    def test_unknown_model(self):
        error = self.assertCode(grpc.StatusCode.NOT_FOUND, self.client.embed, ["a"], model="no-such-model")
        self.assertIn("no-such-model", error.message)
        self.assertIn(EMBEDDER, error.message)  # the message lists the loaded models
        self.assertTrue(str(error).startswith("NOT_FOUND: "))
        self.assertCode(grpc.StatusCode.NOT_FOUND, self.client.model, "no-such-model")

    def test_steps_out_of_range(self):
        info = self.client.model(EMBEDDER)
        error = self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.embed, "a", model=EMBEDDER,
                                steps=info.max_steps + 1)
        self.assertIn(str(info.max_steps + 1), error.message)
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.classify, "a", model=CLASSIFIER, steps=-1)

    def test_other_invalid_arguments(self):
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.embed, [], model=EMBEDDER)
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.embed, ["a", ""], model=EMBEDDER)
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.embed, "a", model=EMBEDDER, budget=0)
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.classify, "a", model=CLASSIFIER, top_k=-1)
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.translate, "a", model=TRANSLATOR,
                        beam_size=99)
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.translate, "a", model=TRANSLATOR, solver="rk4")

    def test_wrong_task(self):
        self.assertCode(grpc.StatusCode.FAILED_PRECONDITION, self.client.classify, "a", model=EMBEDDER)
        self.assertCode(grpc.StatusCode.FAILED_PRECONDITION, self.client.translate, "a", model=CLASSIFIER)

    def test_client_deadline(self):
        # A deadline far too short for any call ends client-side with DEADLINE_EXCEEDED.
        self.assertCode(grpc.StatusCode.DEADLINE_EXCEEDED, self.client.embed, "a", model=EMBEDDER, timeout=1e-6)

    def test_nobody_listening(self):
        with Client("127.0.0.1:1", timeout=5) as nowhere:
            self.assertCode(grpc.StatusCode.UNAVAILABLE, nowhere.models)


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


class TokenTest(unittest.TestCase):
    TOKEN = "python-client-test-token"

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="odeserve-pyclient-auth-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        tokens = _write(os.path.join(cls.dir, "tokens"), "# test tokens\n%s\n" % cls.TOKEN)
        cls.server = _support.ServerProcess(["--auth_tokens_file=" + tokens])
        cls.addClassCleanup(cls.server.stop)

    def test_with_token(self):
        with Client(self.server.address, token=self.TOKEN) as c:
            self.assertEqual(c.embed(["a", "b"], model=EMBEDDER, budget=0.5).embeddings.shape[0], 2)
            self.assertEqual({m.name for m in c.models()}, TEST_MODELS)
            self.assertTrue(list(c.translate_stream("a", model=TRANSLATOR))[-1].final)

    def assertUnauthenticated(self, client, what):
        for call in (lambda: client.embed("a", model=EMBEDDER), client.models, lambda: client.model(EMBEDDER),
                     lambda: list(client.translate_stream("a", model=TRANSLATOR))):
            with self.assertRaises(OdeserveError) as caught:
                call()
            self.assertIs(caught.exception.code, grpc.StatusCode.UNAUTHENTICATED, what)
            self.assertTrue(caught.exception.message)

    def test_without_or_with_a_wrong_token(self):
        for token in (None, "wrong-token", ""):
            with Client(self.server.address, token=token) as c:
                self.assertUnauthenticated(c, token)

    def test_token_from_the_environment(self):
        # Client() without token= sends $ODESERVE_TOKEN, as odeserve-cli does.
        with mock.patch.dict(os.environ, {"ODESERVE_TOKEN": self.TOKEN}):
            with Client(self.server.address) as c:
                self.assertEqual(c.embed(["a", "b"], model=EMBEDDER, budget=0.5).embeddings.shape[0], 2)
                self.assertEqual({m.name for m in c.models()}, TEST_MODELS)
                self.assertTrue(list(c.translate_stream("a", model=TRANSLATOR))[-1].final)
            with Client(self.server.address, token="") as opted_out:  # '' sends none
                self.assertUnauthenticated(opted_out, "token='' with $ODESERVE_TOKEN set")
            with Client(self.server.address, token="wrong-token") as explicit:  # an explicit token wins
                self.assertUnauthenticated(explicit, "explicit wrong token with $ODESERVE_TOKEN set")
        with mock.patch.dict(os.environ, {"ODESERVE_TOKEN": "wrong-token"}):
            with Client(self.server.address) as c:
                self.assertUnauthenticated(c, "$ODESERVE_TOKEN=wrong-token")
            with Client(self.server.address, token=self.TOKEN) as explicit:
                self.assertEqual(len(explicit.models()), len(TEST_MODELS))
        with mock.patch.dict(os.environ, {"ODESERVE_TOKEN": ""}):  # empty: no token
            with Client(self.server.address) as c:
                self.assertUnauthenticated(c, "$ODESERVE_TOKEN empty")


@unittest.skipUnless(shutil.which("openssl"), "openssl is needed to make test certificates")
class TlsTest(unittest.TestCase):
    """TLS with a token, and mutual TLS, with certificates made by openssl (as tests/interop)."""
    TOKEN = "tls-test-token"

    @classmethod
    def setUpClass(cls):
        cls.dir = d = tempfile.mkdtemp(prefix="odeserve-pyclient-tls-")
        cls.addClassCleanup(shutil.rmtree, d, True)

        def openssl(*args):
            subprocess.run(["openssl"] + list(args), cwd=d, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)

        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=odeserve-test-ca",
                "-keyout", "ca.key", "-out", "ca.crt")
        _write(os.path.join(d, "san.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        for who in ("server", "client"):
            openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=odeserve-" + who, "-keyout", who + ".key",
                    "-out", who + ".csr")
            openssl("x509", "-req", "-in", who + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                    "-days", "2", *(["-extfile", "san.ext"] if who == "server" else []), "-out", who + ".crt")
        tokens = _write(os.path.join(d, "tokens"), cls.TOKEN + "\n")
        cls.tls = _support.ServerProcess(["--tls_cert=%s/server.crt" % d, "--tls_key=%s/server.key" % d,
                                          "--auth_tokens_file=" + tokens])
        cls.addClassCleanup(cls.tls.stop)
        cls.mtls = _support.ServerProcess(["--tls_cert=%s/server.crt" % d, "--tls_key=%s/server.key" % d,
                                           "--tls_client_ca=%s/ca.crt" % d])
        cls.addClassCleanup(cls.mtls.stop)

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_tls_with_roots_as_path_and_bytes(self):
        with open(self.path("ca.crt"), "rb") as f:
            ca_bytes = f.read()
        for roots in (self.path("ca.crt"), ca_bytes):
            with Client(self.tls.address, root_certificates=roots, token=self.TOKEN, timeout=30) as c:
                self.assertTrue(c.tls)
                self.assertEqual(c.embed("a", model=EMBEDDER, steps=1).report.steps, 1)
        with Client(self.tls.address.replace("127.0.0.1", "localhost"), root_certificates=ca_bytes,
                    server_name="localhost", token=self.TOKEN, timeout=30) as c:
            self.assertEqual(len(c.models()), len(TEST_MODELS))

    def test_tls_without_token_or_with_plain_text(self):
        with Client(self.tls.address, root_certificates=self.path("ca.crt"), timeout=30) as c:
            with self.assertRaises(OdeserveError) as caught:
                c.models()
            self.assertIs(caught.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        with Client(self.tls.address, token=self.TOKEN, timeout=5) as plain:
            with self.assertRaises(OdeserveError) as caught:
                plain.models()
            self.assertIs(caught.exception.code, grpc.StatusCode.UNAVAILABLE)

    def test_mutual_tls(self):
        with Client(self.mtls.address, root_certificates=self.path("ca.crt"),
                    certificate_chain=self.path("client.crt"), private_key=self.path("client.key"), timeout=30) as c:
            self.assertEqual(c.classify("a", model=CLASSIFIER).report.batch_size, 1)
        with Client(self.mtls.address, root_certificates=self.path("ca.crt"), timeout=5) as no_client_cert:
            with self.assertRaises(OdeserveError) as caught:
                no_client_cert.models()
            self.assertIs(caught.exception.code, grpc.StatusCode.UNAVAILABLE)


if __name__ == "__main__":
    unittest.main()
