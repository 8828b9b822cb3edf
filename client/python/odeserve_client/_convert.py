"""Argument conversion (Python values -> odeserve.v1 request fields) and response conversion
(odeserve.v1 messages -> the dataclasses of odeserve_client.types)."""
import datetime
import enum
import math
import numbers
import operator
import os

from . import datatypes as types

try:  # optional: embeddings come back as a float32 array when numpy is importable
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the environment
    _np = None

_SOLVER_NAMES = {"euler": types.Solver.EULER, "heun": types.Solver.HEUN, "rk4": types.Solver.RK4}
_MISS_NAMES = {"serve_floor": types.BudgetMissPolicy.SERVE_FLOOR, "floor": types.BudgetMissPolicy.SERVE_FLOOR,
               "refuse": types.BudgetMissPolicy.REFUSE}


# ------------------------------------------------------------------------------ arguments
def texts(value):
    """A single string is one input; otherwise any iterable of strings."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (bytes, bytearray)):
        raise TypeError("texts must be str or an iterable of str, not bytes (decode them first)")
    try:
        items = list(value)
    except TypeError:
        raise TypeError("texts must be str or an iterable of str, not %s" % type(value).__name__) from None
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise TypeError("texts[%d] must be str, not %s" % (i, type(item).__name__))
    return items


def integer(name, value):
    """An int option (steps, top_k, ...): ints and integer-like objects, not bools or floats."""
    if isinstance(value, bool):
        raise TypeError("%s must be an int, not bool" % name)
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError("%s must be an int, not %s" % (name, type(value).__name__)) from None


def _enum_value(name, value, names, enum_type):
    if isinstance(value, bool):
        raise TypeError("%s must be a name or %s, not bool" % (name, enum_type.__name__))
    if isinstance(value, str):
        key = value.strip().lower().replace("-", "_")
        if key not in names:
            raise ValueError("unknown %s %r (one of: %s)" % (name, value, ", ".join(sorted(names))))
        return int(names[key])
    if isinstance(value, enum.Enum) and not isinstance(value, int):
        value = value.value
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError("%s must be a name (%s) or %s, not %s" % (
            name, "/".join(sorted(names)), enum_type.__name__, type(value).__name__)) from None
    try:
        return int(enum_type(number))
    except ValueError:
        raise ValueError("%s %d is not a value of %s" % (name, number, enum_type.__name__)) from None


def solver(value):
    """'euler' / 'heun' / 'rk4' (any case), a Solver, or the proto enum number -> the number."""
    return _enum_value("solver", value, _SOLVER_NAMES, types.Solver)


def budget_miss_policy(value):
    """'serve_floor' (or 'floor') / 'refuse' (any case, '-' or '_'), a BudgetMissPolicy, or the
    proto enum number -> the number."""
    return _enum_value("on_budget_miss", value, _MISS_NAMES, types.BudgetMissPolicy)


def nanoseconds(name, value):
    """A duration as a datetime.timedelta or seconds (int or float) -> integer nanoseconds.

    timedeltas convert exactly; seconds are rounded to the nearest nanosecond."""
    if isinstance(value, datetime.timedelta):
        return ((value.days * 86400 + value.seconds) * 1000000 + value.microseconds) * 1000
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("%s must be a datetime.timedelta or seconds (int/float), not %s"
                        % (name, type(value).__name__))
    if isinstance(value, numbers.Integral):
        return int(value) * 1000000000
    seconds = float(value)
    if not math.isfinite(seconds):
        raise ValueError("%s must be finite, not %r" % (name, value))
    return int(round(seconds * 1e9))


def seconds(name, value):
    """A timeout as timedelta or seconds -> float seconds (None stays None)."""
    if value is None:
        return None
    return nanoseconds(name, value) / 1e9


def file_or_bytes(name, value):
    """Certificates and keys: bytes (PEM), or a path (str / os.PathLike) to read."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if not os.path.isfile(path):
            raise ValueError("%s: %r is not a file" % (name, path))
        with open(path, "rb") as f:
            data = f.read()
        if not data:
            raise ValueError("%s: %r is empty" % (name, path))
        return data
    raise TypeError("%s must be bytes or a path, not %s" % (name, type(value).__name__))


def compute_options(message, *, steps=None, solver_=None, budget=None, min_steps=None, on_budget_miss=None,
                    decoder_steps=None):
    """Fills an odeserve.v1.ComputeOptions message; None leaves a field unset (the server's choice)."""
    if steps is not None:
        message.steps = integer("steps", steps)
    if budget is not None:
        ns = nanoseconds("budget", budget)
        message.latency_budget.SetInParent()  # present even when zero (the server refuses <= 0)
        message.latency_budget.FromNanoseconds(ns)
    if solver_ is not None:
        message.solver = solver(solver_)
    if min_steps is not None:
        message.min_steps = integer("min_steps", min_steps)
    if on_budget_miss is not None:
        message.on_budget_miss = budget_miss_policy(on_budget_miss)
    if decoder_steps is not None:
        message.decoder_steps = integer("decoder_steps", decoder_steps)
    return message


# ------------------------------------------------------------------------------ responses
def timedelta(duration):
    """google.protobuf.Duration -> datetime.timedelta, rounded to the nearest microsecond."""
    micros, rest = divmod(duration.seconds * 1000000000 + duration.nanos, 1000)
    return datetime.timedelta(microseconds=micros + (1 if rest >= 500 else 0))


def _enum_name(message, field, value):
    enum_type = message.DESCRIPTOR.fields_by_name[field].enum_type
    known = enum_type.values_by_number.get(value)
    return known.name if known is not None else str(value)  # a value newer than these stubs


def report(message):
    """odeserve.v1.ComputeReport -> types.ComputeReport."""
    return types.ComputeReport(
        steps=message.steps,
        solver=_enum_name(message, "solver", message.solver),
        step_size=message.step_size,
        field_evaluations=message.field_evaluations,
        queue_time=timedelta(message.queue_time),
        compute_time=timedelta(message.compute_time),
        total_time=timedelta(message.total_time),
        predicted_time=timedelta(message.predicted_time),
        budget_set=message.budget_set,
        budget_met=message.budget_met,
        budget=timedelta(message.budget) if message.HasField("budget") else None,
        batch_size=message.batch_size,
        step_choice=_enum_name(message, "step_choice", message.step_choice),
        device=message.device,
        tokens=message.tokens,
        truncated_inputs=message.truncated_inputs,
        decoder_steps=message.decoder_steps,
        decoder_step_size=message.decoder_step_size,
        beam_size=message.beam_size,
        output_tokens=message.output_tokens,
    )


def embeddings(rows):
    """Repeated odeserve.v1.Embedding -> float32 array [N, D] (numpy) or N lists of floats."""
    if _np is None:
        return [list(row.values) for row in rows]
    if not rows:
        return _np.zeros((0, 0), dtype=_np.float32)
    return _np.array([row.values for row in rows], dtype=_np.float32)


def embed_result(response):
    return types.EmbedResult(model=response.model, embeddings=embeddings(response.embeddings),
                             report=report(response.report))


def classify_result(response):
    labels = [[(ls.label, ls.score) for ls in result.labels] for result in response.results]
    return types.ClassifyResult(model=response.model, labels=labels, report=report(response.report))


def translate_result(response):
    return types.TranslateResult(model=response.model, translations=list(response.translations),
                                 scores=list(response.scores), report=report(response.report))


def stream_message(message):
    return types.TranslateStreamMessage(
        index=message.index, text=message.text, final=message.final, score=message.score,
        report=report(message.report) if message.HasField("report") else None)


def quality_point(message):
    return types.QualityPoint(solver=_enum_name(message, "solver", message.solver), steps=message.steps,
                              metric=message.metric, value=message.value, dataset=message.dataset,
                              decoder_steps=message.decoder_steps, beam_size=message.beam_size)


def cost_model(message):
    return types.CostModel(
        fixed_seconds=message.fixed_seconds, per_row_seconds=message.per_row_seconds,
        per_token_seconds=message.per_token_seconds,
        per_token_evaluation_seconds=message.per_token_evaluation_seconds,
        calibration_samples=message.calibration_samples, online_samples=message.online_samples,
        mean_abs_relative_error=message.mean_abs_relative_error, latency_inflation=message.latency_inflation,
        per_decoder_call_seconds=message.per_decoder_call_seconds,
        per_decoder_row_evaluation_seconds=message.per_decoder_row_evaluation_seconds)


def translation_info(message):
    return types.TranslationInfo(
        decoder_trained_depth=message.decoder_trained_depth, min_decoder_steps=message.min_decoder_steps,
        max_decoder_steps=message.max_decoder_steps, default_decoder_steps=message.default_decoder_steps,
        max_output_tokens=message.max_output_tokens, max_beam_size=message.max_beam_size,
        source_language=message.source_language, target_language=message.target_language,
        length_penalty=message.length_penalty)


def model_info(message):
    """odeserve.v1.ModelInfo -> types.ModelInfo."""
    return types.ModelInfo(
        name=message.name,
        task=_enum_name(message, "task", message.task),
        version=message.version,
        family=message.family,
        labels=list(message.labels),
        languages=list(message.languages),
        embedding_dimension=message.embedding_dimension,
        hidden_size=message.hidden_size,
        trained_depth=message.trained_depth,
        solvers=[_enum_name(message, "solvers", s) for s in message.solvers],
        min_steps=message.min_steps,
        max_steps=message.max_steps,
        default_steps=message.default_steps,
        max_sequence_length=message.max_sequence_length,
        max_batch_size=message.max_batch_size,
        max_inputs_per_request=message.max_inputs_per_request,
        quality_profile=[quality_point(p) for p in message.quality_profile],
        cost_model=cost_model(message.cost_model) if message.HasField("cost_model") else None,
        parameters=message.parameters,
        size_bytes=message.size_bytes,
        device=message.device,
        state=_enum_name(message, "state", message.state),
        error=message.error,
        description=message.description,
        translation=translation_info(message.translation) if message.HasField("translation") else None,
        compute_precision=_enum_name(message, "compute_precision", message.compute_precision),
        pad_to_multiple=message.pad_to_multiple,
        continuous_batching=message.continuous_batching,
        quality_tolerance=message.quality_tolerance,
        quality_profile_measured=message.quality_profile_measured,
        default_steps_source=message.default_steps_source,
    )
