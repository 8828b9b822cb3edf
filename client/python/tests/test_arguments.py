"""Unit tests without a server: argument conversion, response conversion, errors, stubs."""
import dataclasses
import datetime
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _support  # noqa: E402  (sys.path and the stub folder first)

import grpc  # noqa: E402
from google.protobuf import duration_pb2  # noqa: E402

import odeserve_client  # noqa: E402
from odeserve_client import BudgetMissPolicy, Client, OdeserveError, Solver, _convert, _stubs, datatypes  # noqa: E402
from odeserve_client._proto import inference_pb2 as pb  # noqa: E402


class TextsTest(unittest.TestCase):
    def test_single_string_is_one_input(self):
        self.assertEqual(_convert.texts("a b"), ["a b"])

    def test_iterables(self):
        self.assertEqual(_convert.texts(["a", "b"]), ["a", "b"])
        self.assertEqual(_convert.texts(("a",)), ["a"])
        self.assertEqual(_convert.texts(t for t in ["x", "y"]), ["x", "y"])
        self.assertEqual(_convert.texts([]), [])  # the server answers INVALID_ARGUMENT

    def test_rejects_non_strings(self):
        with self.assertRaises(TypeError):
            _convert.texts(b"bytes")
        with self.assertRaisesRegex(TypeError, r"texts\[1\]"):
            _convert.texts(["a", 3])
        with self.assertRaises(TypeError):
            _convert.texts(5)


class SolverTest(unittest.TestCase):
    def test_names_any_case(self):
        for name, value in (("euler", 1), ("heun", 2), ("rk4", 3), ("EULER", 1), ("Heun", 2), (" RK4 ", 3)):
            self.assertEqual(_convert.solver(name), value, name)

    def test_enums_and_numbers(self):
        self.assertEqual(_convert.solver(Solver.HEUN), 2)
        self.assertEqual(_convert.solver(pb.RK4), 3)  # the generated proto enum value
        self.assertEqual(_convert.solver(1), 1)
        self.assertEqual(int(Solver.RK4), pb.RK4)

    def test_rejects(self):
        with self.assertRaisesRegex(ValueError, "unknown solver 'midpoint'"):
            _convert.solver("midpoint")
        with self.assertRaises(ValueError):
            _convert.solver(7)
        with self.assertRaises(TypeError):
            _convert.solver(True)
        with self.assertRaises(TypeError):
            _convert.solver(2.0)


class BudgetMissPolicyTest(unittest.TestCase):
    def test_names(self):
        for name, value in (("serve_floor", 1), ("SERVE_FLOOR", 1), ("serve-floor", 1), ("floor", 1),
                            ("refuse", 2), ("Refuse", 2)):
            self.assertEqual(_convert.budget_miss_policy(name), value, name)
        self.assertEqual(_convert.budget_miss_policy(BudgetMissPolicy.REFUSE), pb.REFUSE)
        self.assertEqual(_convert.budget_miss_policy(pb.SERVE_FLOOR), 1)

    def test_rejects(self):
        with self.assertRaises(ValueError):
            _convert.budget_miss_policy("ignore")
        with self.assertRaises(ValueError):
            _convert.budget_miss_policy(3)


class DurationTest(unittest.TestCase):
    def test_timedelta_exact(self):
        self.assertEqual(_convert.nanoseconds("budget", datetime.timedelta(milliseconds=10)), 10_000_000)
        self.assertEqual(_convert.nanoseconds("budget", datetime.timedelta(days=1, microseconds=3)),
                         86400 * 10**9 + 3000)
        self.assertEqual(_convert.nanoseconds("budget", datetime.timedelta(microseconds=-5)), -5000)

    def test_seconds(self):
        self.assertEqual(_convert.nanoseconds("budget", 0.010), 10_000_000)
        self.assertEqual(_convert.nanoseconds("budget", 0.0015), 1_500_000)
        self.assertEqual(_convert.nanoseconds("budget", 2), 2 * 10**9)
        self.assertEqual(_convert.nanoseconds("budget", 1.5e-6), 1500)
        self.assertEqual(_convert.nanoseconds("budget", 0.1 + 0.2), 300_000_000)  # rounded, not truncated

    def test_rejects(self):
        with self.assertRaisesRegex(TypeError, "timedelta or seconds"):
            _convert.nanoseconds("budget", "10ms")
        with self.assertRaises(TypeError):
            _convert.nanoseconds("budget", True)
        with self.assertRaises(ValueError):
            _convert.nanoseconds("budget", float("nan"))
        with self.assertRaises(ValueError):
            _convert.nanoseconds("budget", float("inf"))

    def test_timeout_seconds(self):
        self.assertIsNone(_convert.seconds("timeout", None))
        self.assertEqual(_convert.seconds("timeout", datetime.timedelta(seconds=2, milliseconds=500)), 2.5)
        self.assertEqual(_convert.seconds("timeout", 3), 3.0)

    def test_proto_duration_to_timedelta_rounds(self):
        self.assertEqual(_convert.timedelta(duration_pb2.Duration(seconds=3)), datetime.timedelta(seconds=3))
        self.assertEqual(_convert.timedelta(duration_pb2.Duration(nanos=1499)), datetime.timedelta(microseconds=1))
        self.assertEqual(_convert.timedelta(duration_pb2.Duration(nanos=1500)), datetime.timedelta(microseconds=2))
        self.assertEqual(_convert.timedelta(duration_pb2.Duration(seconds=1, nanos=250_000_000)),
                         datetime.timedelta(seconds=1.25))


class ComputeOptionsTest(unittest.TestCase):
    def build(self, **kwargs):
        return _convert.compute_options(pb.ComputeOptions(), **kwargs)

    def test_unset_by_default(self):
        c = self.build()
        self.assertEqual(c, pb.ComputeOptions())
        self.assertFalse(c.HasField("latency_budget"))

    def test_budget_float_and_timedelta_agree(self):
        a = self.build(budget=0.010)
        b = self.build(budget=datetime.timedelta(milliseconds=10))
        self.assertEqual(a, b)
        self.assertEqual((a.latency_budget.seconds, a.latency_budget.nanos), (0, 10_000_000))
        c = self.build(budget=2.5)
        self.assertEqual((c.latency_budget.seconds, c.latency_budget.nanos), (2, 500_000_000))

    def test_zero_budget_is_sent(self):
        # Present though zero, so the server refuses it (INVALID_ARGUMENT) rather than ignoring it.
        c = self.build(budget=0)
        self.assertTrue(c.HasField("latency_budget"))

    def test_every_field(self):
        c = self.build(steps=3, solver_="heun", budget=datetime.timedelta(microseconds=1500), min_steps=2,
                       on_budget_miss="refuse", decoder_steps=5)
        self.assertEqual(c.steps, 3)
        self.assertEqual(c.solver, pb.HEUN)
        self.assertEqual((c.latency_budget.seconds, c.latency_budget.nanos), (0, 1_500_000))
        self.assertEqual(c.min_steps, 2)
        self.assertEqual(c.on_budget_miss, pb.REFUSE)
        self.assertEqual(c.decoder_steps, 5)

    def test_int_options_reject_floats_and_bools(self):
        with self.assertRaises(TypeError):
            self.build(steps=2.5)
        with self.assertRaises(TypeError):
            self.build(min_steps=True)


class ResponseConversionTest(unittest.TestCase):
    def test_dataclasses_mirror_the_proto(self):
        pairs = [(datatypes.ComputeReport, pb.ComputeReport), (datatypes.ModelInfo, pb.ModelInfo),
                 (datatypes.QualityPoint, pb.QualityPoint), (datatypes.TranslationInfo, pb.TranslationInfo),
                 (datatypes.CostModel, pb.CostModel), (datatypes.TranslateStreamMessage, pb.TranslateStreamResponse)]
        for cls, message in pairs:
            self.assertEqual({f.name for f in dataclasses.fields(cls)},
                             {f.name for f in message.DESCRIPTOR.fields}, cls.__name__)

    def test_report(self):
        m = pb.ComputeReport(steps=3, solver=pb.HEUN, step_size=4 / 3, field_evaluations=6, budget_set=True,
                             budget_met=False, batch_size=2, step_choice=pb.BUDGET_FLOOR, device="cpu", tokens=9)
        m.total_time.FromNanoseconds(2_500_000)
        m.budget.FromNanoseconds(1_000_000)
        r = _convert.report(m)
        self.assertEqual((r.steps, r.solver, r.field_evaluations, r.step_choice), (3, "HEUN", 6, "BUDGET_FLOOR"))
        self.assertEqual(r.total_time, datetime.timedelta(microseconds=2500))
        self.assertEqual(r.budget, datetime.timedelta(milliseconds=1))
        self.assertEqual(r.queue_time, datetime.timedelta(0))
        self.assertFalse(r.budget_met)
        self.assertIsNone(_convert.report(pb.ComputeReport()).budget)
        self.assertEqual(_convert.report(pb.ComputeReport()).solver, "SOLVER_UNSPECIFIED")

    def test_unknown_enum_value_from_a_newer_server(self):
        self.assertEqual(_convert.report(pb.ComputeReport(step_choice=42)).step_choice, "42")

    def test_embeddings_numpy_and_lists(self):
        response = pb.EmbedResponse(model="m", embeddings=[pb.Embedding(values=[1, 2, 3]),
                                                           pb.Embedding(values=[4, 5, 6])])
        result = _convert.embed_result(response)
        if _convert._np is not None:
            self.assertEqual(result.embeddings.shape, (2, 3))
            self.assertEqual(str(result.embeddings.dtype), "float32")
            self.assertEqual(result.embeddings.tolist(), [[1, 2, 3], [4, 5, 6]])
        with mock.patch.object(_convert, "_np", None):
            self.assertEqual(_convert.embed_result(response).embeddings, [[1, 2, 3], [4, 5, 6]])

    def test_classify_and_stream(self):
        response = pb.ClassifyResponse(results=[pb.ClassificationResult(labels=[pb.LabelScore(label="a", score=0.5)])])
        self.assertEqual(_convert.classify_result(response).labels, [[("a", 0.5)]])
        self.assertIsNone(_convert.stream_message(pb.TranslateStreamResponse(index=1, text="x")).report)
        last = _convert.stream_message(pb.TranslateStreamResponse(final=True, report=pb.ComputeReport(steps=2)))
        self.assertEqual(last.report.steps, 2)

    def test_model_info(self):
        m = pb.ModelInfo(name="t", task=pb.TRANSLATION, solvers=[pb.EULER, pb.RK4], state=pb.READY,
                         compute_precision=pb.BFLOAT16, translation=pb.TranslationInfo(max_beam_size=4))
        info = _convert.model_info(m)
        self.assertEqual((info.task, info.solvers, info.state, info.compute_precision),
                         ("TRANSLATION", ["EULER", "RK4"], "READY", "BFLOAT16"))
        self.assertEqual(info.translation.max_beam_size, 4)
        self.assertIsNone(info.cost_model)
        self.assertIsNone(_convert.model_info(pb.ModelInfo()).translation)


class ErrorTest(unittest.TestCase):
    def test_from_rpc_error(self):
        class FakeRpcError(grpc.RpcError):
            def code(self):
                return grpc.StatusCode.NOT_FOUND

            def details(self):
                return "model 'x' not found"

        error = OdeserveError.from_rpc_error(FakeRpcError())
        self.assertIs(error.code, grpc.StatusCode.NOT_FOUND)
        self.assertEqual(error.message, "model 'x' not found")
        self.assertEqual(str(error), "NOT_FOUND: model 'x' not found")
        self.assertEqual(error.code_name, "NOT_FOUND")
        self.assertIs(OdeserveError.from_rpc_error(grpc.RpcError()).code, grpc.StatusCode.UNKNOWN)


class ClientArgumentsTest(unittest.TestCase):
    def test_token_and_timeout(self):
        with Client("localhost:1", token="s3cret", timeout=datetime.timedelta(seconds=2)) as c:
            self.assertEqual(c._metadata, (("authorization", "Bearer s3cret"),))
            self.assertEqual(c.timeout, 2.0)
            self.assertFalse(c.tls)
        self.assertTrue(c._closed)
        with self.assertRaises(ValueError):
            c.models()
        c.close()  # idempotent
        for bad in (" s3cret", "s3cret\n", b"s3cret"):
            with self.assertRaises(ValueError):
                Client("localhost:1", token=bad)

    def test_token_from_the_environment(self):
        bearer = (("authorization", "Bearer from-env"),)
        with mock.patch.dict(os.environ, {"ODESERVE_TOKEN": "from-env"}):
            self.assertEqual(Client("localhost:1")._metadata, bearer)
            self.assertEqual(Client("localhost:1", token=None)._metadata, bearer)
            self.assertEqual(Client("localhost:1", token="explicit")._metadata,
                             (("authorization", "Bearer explicit"),))  # an explicit token wins
            self.assertIsNone(Client("localhost:1", token="")._metadata)  # '' opts out
        with mock.patch.dict(os.environ, {"ODESERVE_TOKEN": ""}):
            self.assertIsNone(Client("localhost:1")._metadata)  # empty: none, as odeserve-cli
        with mock.patch.dict(os.environ, {"ODESERVE_TOKEN": "from-env\n"}):
            with self.assertRaisesRegex(ValueError, "ODESERVE_TOKEN"):
                Client("localhost:1")
            self.assertIsNone(Client("localhost:1", token="")._metadata)
        with mock.patch.dict(os.environ):
            os.environ.pop("ODESERVE_TOKEN", None)
            self.assertIsNone(Client("localhost:1")._metadata)
            self.assertIsNone(Client("localhost:1", token="")._metadata)

    def test_tls_arguments(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ca.pem")
            with open(path, "wb") as f:
                f.write(b"-----BEGIN CERTIFICATE-----\n")
            self.assertTrue(Client("localhost:1", root_certificates=path).tls)  # implies TLS
            self.assertTrue(Client("localhost:1", root_certificates=b"pem").tls)
            self.assertTrue(Client("localhost:1", tls=True).tls)
            with self.assertRaisesRegex(ValueError, "not a file"):
                Client("localhost:1", root_certificates=os.path.join(d, "missing.pem"))
            with self.assertRaisesRegex(ValueError, "together"):
                Client("localhost:1", certificate_chain=path)
            with self.assertRaisesRegex(ValueError, "needs TLS"):
                Client("localhost:1", server_name="localhost")

    def test_argument_errors_before_any_call(self):
        with Client("localhost:1") as c:
            with self.assertRaises(ValueError):
                c.embed("x", model="m", solver="midpoint")
            with self.assertRaises(TypeError):
                c.embed("x", model="m", budget="10ms")
            with self.assertRaises(TypeError):
                c.translate("x", model="m", length_penalty="1")
            with self.assertRaises(ValueError):
                c.translate_stream("x", model="m", on_budget_miss="ignore")

    def test_public_names(self):
        for name in odeserve_client.__all__:
            self.assertTrue(hasattr(odeserve_client, name), name)


class StubGenerationTest(unittest.TestCase):
    def test_generated_modules_import_relatively(self):
        with tempfile.TemporaryDirectory() as d:
            _stubs.generate(d)
            with open(os.path.join(d, "inference_pb2_grpc.py")) as f:
                text = f.read()
            self.assertIn("from . import inference_pb2 as", text)
            self.assertNotIn("from odeserve.v1", text)
            self.assertTrue(os.path.isfile(os.path.join(d, "inference_pb2.py")))

    def test_cache_is_reused_and_keyed_by_the_proto(self):
        with tempfile.TemporaryDirectory() as d, mock.patch.dict(os.environ, {"ODESERVE_CLIENT_STUB_DIR": d}):
            first = _stubs.ensure_cached()
            mtime = os.path.getmtime(os.path.join(first, "inference_pb2.py"))
            self.assertEqual(_stubs.ensure_cached(), first)
            self.assertEqual(os.path.getmtime(os.path.join(first, "inference_pb2.py")), mtime)
            self.assertEqual(os.listdir(d), [os.path.basename(first)])  # no temporary folders left
            proto = os.path.join(d, "proto")
            os.makedirs(os.path.join(proto, "odeserve", "v1"))
            with open(os.path.join(_stubs.find_proto_dir(), _stubs.PROTO_FILE)) as f:
                text = f.read()
            with open(os.path.join(proto, _stubs.PROTO_FILE), "w") as f:
                f.write(text + "\n// changed\n")
            self.assertNotEqual(_stubs.ensure_cached(proto), first)

    def test_fresh_import_from_the_source_tree(self):
        # A clean checkout: an empty cache, and a cache folder that cannot be written (falls back
        # to the temp folder).
        code = ("import odeserve_client, odeserve_client._proto as p; "
                "from odeserve_client._proto import inference_pb2_grpc; print(p.STUB_DIR)")
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, PYTHONPATH=_support.PACKAGE_ROOT, ODESERVE_CLIENT_STUB_DIR=os.path.join(d, "c"))
            out = subprocess.run([sys.executable, "-c", code], env=env, cwd=d, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, universal_newlines=True, check=True).stdout.strip()
            self.assertTrue(out.startswith(os.path.join(d, "c", "stubs-")), out)
            blocked = os.path.join(d, "not-a-folder")
            open(blocked, "w").close()
            env = dict(os.environ, PYTHONPATH=_support.PACKAGE_ROOT, XDG_CACHE_HOME=blocked, TMPDIR=d)
            env.pop("ODESERVE_CLIENT_STUB_DIR")
            out = subprocess.run([sys.executable, "-c", code], env=env, cwd=d, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, universal_newlines=True, check=True).stdout.strip()
            self.assertTrue(out.startswith(os.path.join(d, "odeserve_client-")), out)

    def test_missing_generator_is_explained(self):
        with tempfile.TemporaryDirectory() as d, \
                mock.patch.dict(sys.modules, {"grpc_tools": None}), \
                mock.patch.dict(os.environ, {"PATH": d, "PROTOC": "", "ODESERVE_GRPC_PYTHON_PLUGIN": ""}), \
                mock.patch.object(_stubs, "_find_plugin", return_value=None):
            with self.assertRaisesRegex(_stubs.StubGenerationError, "protoc, grpc_python_plugin"):
                _stubs.generate(os.path.join(d, "out"))


if __name__ == "__main__":
    unittest.main()
