"""odeserve_client.Client: the odeserve.v1.Inference service as Python methods."""
import os

import grpc

from . import _convert
from ._proto import inference_pb2 as pb
from ._proto import inference_pb2_grpc as pb_grpc
from .errors import OdeserveError

# The bearer token's default when Client(token=...) is not given, as for odeserve-cli's --token.
TOKEN_ENVIRONMENT_VARIABLE = "ODESERVE_TOKEN"

# Embeddings of many long inputs exceed gRPC's default 4 MiB receive limit.
_DEFAULT_OPTIONS = (("grpc.max_receive_message_length", 256 << 20),)


class Client:
    """A connection to an odeserve server (one gRPC channel; safe to share between threads).

    address: "host:port". TLS: ``tls=True`` uses the system roots; ``root_certificates``
    (PEM bytes or a file path) verifies the server with those roots and turns TLS on;
    ``certificate_chain`` + ``private_key`` (bytes or paths) add a client certificate (mutual
    TLS); ``server_name`` overrides the name checked in the server's certificate.
    token: sent as ``authorization: Bearer <token>`` metadata on every call (also without TLS,
    e.g. behind a TLS-terminating sidecar; it then travels in clear text). Not given (None):
    $ODESERVE_TOKEN when it is set and not empty, as odeserve-cli does; ``token=""``: no token,
    whatever the environment holds.
    timeout: default gRPC deadline of every call, seconds or timedelta (None: no deadline).
    Note the server takes a call's deadline as its latency budget when no ``budget`` is given.
    options: extra gRPC channel options, e.g. ``[("grpc.enable_retries", 0)]``.
    """

    def __init__(self, address="localhost:8500", *, tls=False, root_certificates=None, token=None, timeout=None,
                 certificate_chain=None, private_key=None, server_name=None, options=()):
        if not isinstance(address, str) or not address:
            raise TypeError("address must be a non-empty 'host:port' string")
        if token is None:
            token = os.environ.get(TOKEN_ENVIRONMENT_VARIABLE) or None  # unset or empty: no token
            if token is not None and token != token.strip():
                raise ValueError("$%s has surrounding whitespace; fix it, or pass token='' to send no token"
                                 % TOKEN_ENVIRONMENT_VARIABLE)
        elif token == "":
            token = None  # explicitly none, also when $ODESERVE_TOKEN is set
        elif not isinstance(token, str) or token != token.strip():
            raise ValueError("token must be a string without surrounding whitespace ('' for none)")
        self.address = address
        self.timeout = _convert.seconds("timeout", timeout)
        self._metadata = (("authorization", "Bearer " + token),) if token is not None else None
        roots = _convert.file_or_bytes("root_certificates", root_certificates)
        chain = _convert.file_or_bytes("certificate_chain", certificate_chain)
        key = _convert.file_or_bytes("private_key", private_key)
        if (chain is None) != (key is None):
            raise ValueError("certificate_chain and private_key must be given together")
        channel_options = list(_DEFAULT_OPTIONS) + list(options)
        self.tls = bool(tls or roots is not None or chain is not None)
        if self.tls:
            if server_name:
                channel_options.append(("grpc.ssl_target_name_override", server_name))
            credentials = grpc.ssl_channel_credentials(root_certificates=roots, private_key=key,
                                                       certificate_chain=chain)
            self._channel = grpc.secure_channel(address, credentials, options=channel_options)
        else:
            if server_name:
                raise ValueError("server_name needs TLS (tls=True or root_certificates)")
            self._channel = grpc.insecure_channel(address, options=channel_options)
        self._stub = pb_grpc.InferenceStub(self._channel)
        self._closed = False

    # ------------------------------------------------------------------ lifetime
    def close(self):
        """Closes the channel; calls in flight are cancelled. Idempotent."""
        if not self._closed:
            self._closed = True
            self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "Client(%r, tls=%s%s)" % (self.address, self.tls, ", closed" if self._closed else "")

    # ------------------------------------------------------------------ plumbing
    def _deadline(self, timeout):
        return self.timeout if timeout is None else _convert.seconds("timeout", timeout)

    def _unary(self, method, request, timeout):
        if self._closed:
            raise ValueError("the client is closed")
        try:
            return method(request, timeout=self._deadline(timeout), metadata=self._metadata)
        except grpc.RpcError as error:
            raise OdeserveError.from_rpc_error(error) from None

    # ------------------------------------------------------------------ inference
    def embed(self, texts, *, model, steps=None, solver=None, budget=None, min_steps=None, on_budget_miss=None,
              normalize=False, truncate=False, timeout=None):
        """Embeddings of ``texts`` (a string or a list of strings): an EmbedResult with
        ``.embeddings`` (float32 [N, D] numpy array, or lists without numpy) and ``.report``."""
        request = pb.EmbedRequest(model=model, inputs=_convert.texts(texts), normalize=bool(normalize),
                                  truncate=bool(truncate))
        _convert.compute_options(request.compute, steps=steps, solver_=solver, budget=budget, min_steps=min_steps,
                                 on_budget_miss=on_budget_miss)
        return _convert.embed_result(self._unary(self._stub.Embed, request, timeout))

    def classify(self, texts, *, model, top_k=1, steps=None, solver=None, budget=None, min_steps=None,
                 on_budget_miss=None, truncate=False, timeout=None):
        """Top-``top_k`` labels of each input: a ClassifyResult with ``.labels`` (per input, a
        list of (label, probability), best first) and ``.report``."""
        request = pb.ClassifyRequest(model=model, inputs=_convert.texts(texts), top_k=_convert.integer("top_k", top_k),
                                     truncate=bool(truncate))
        _convert.compute_options(request.compute, steps=steps, solver_=solver, budget=budget, min_steps=min_steps,
                                 on_budget_miss=on_budget_miss)
        return _convert.classify_result(self._unary(self._stub.Classify, request, timeout))

    def _translate_request(self, texts, model, beam_size, decoder_steps, max_output_tokens, length_penalty, steps,
                           solver, budget, min_steps, on_budget_miss, truncate):
        request = pb.TranslateRequest(model=model, inputs=_convert.texts(texts), truncate=bool(truncate))
        if beam_size is not None:
            request.beam_size = _convert.integer("beam_size", beam_size)
        if max_output_tokens is not None:
            request.max_output_tokens = _convert.integer("max_output_tokens", max_output_tokens)
        if length_penalty is not None:
            if isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float)):
                raise TypeError("length_penalty must be a number, not %s" % type(length_penalty).__name__)
            request.length_penalty = float(length_penalty)
        _convert.compute_options(request.compute, steps=steps, solver_=solver, budget=budget, min_steps=min_steps,
                                 on_budget_miss=on_budget_miss, decoder_steps=decoder_steps)
        return request

    def translate(self, texts, *, model, beam_size=None, decoder_steps=None, max_output_tokens=None,
                  length_penalty=None, steps=None, solver=None, budget=None, min_steps=None, on_budget_miss=None,
                  truncate=False, timeout=None):
        """Translations: a TranslateResult with ``.translations``, ``.scores`` and ``.report``.
        ``steps`` are the encoder's steps, ``decoder_steps`` the decoder's."""
        request = self._translate_request(texts, model, beam_size, decoder_steps, max_output_tokens, length_penalty,
                                          steps, solver, budget, min_steps, on_budget_miss, truncate)
        return _convert.translate_result(self._unary(self._stub.Translate, request, timeout))

    def translate_stream(self, texts, *, model, beam_size=None, decoder_steps=None, max_output_tokens=None,
                         length_penalty=None, steps=None, solver=None, budget=None, min_steps=None,
                         on_budget_miss=None, truncate=False, timeout=None):
        """Translations as they are decoded: an iterator of TranslateStreamMessage (index, text,
        final, score, report). Greedy search yields each input's text so far after every
        token; beam search only final messages; the last message carries the report.

        The call starts at once; errors (also mid-stream) raise OdeserveError from the iterator.
        Closing the iterator (``.close()``, or leaving a ``with contextlib.closing(...)``)
        cancels the call."""
        request = self._translate_request(texts, model, beam_size, decoder_steps, max_output_tokens, length_penalty,
                                          steps, solver, budget, min_steps, on_budget_miss, truncate)
        if self._closed:
            raise ValueError("the client is closed")
        try:
            call = self._stub.TranslateStream(request, timeout=self._deadline(timeout), metadata=self._metadata)
        except grpc.RpcError as error:
            raise OdeserveError.from_rpc_error(error) from None
        return _stream(call)

    # ------------------------------------------------------------------ models
    def models(self, *, timeout=None):
        """Every model the server holds, ready or not: a list of ModelInfo."""
        response = self._unary(self._stub.ListModels, pb.ListModelsRequest(), timeout)
        return [_convert.model_info(m) for m in response.models]

    def model(self, name, *, timeout=None):
        """One model's ModelInfo (metadata, quality profile, current cost model)."""
        response = self._unary(self._stub.GetModel, pb.GetModelRequest(name=name), timeout)
        return _convert.model_info(response.model)


def _stream(call):
    try:
        for message in call:
            yield _convert.stream_message(message)
    except grpc.RpcError as error:
        raise OdeserveError.from_rpc_error(error) from None
    finally:
        call.cancel()  # no-op once the call has finished; stops the server when the reader quits early
