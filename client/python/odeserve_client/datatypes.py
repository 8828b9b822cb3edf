"""Plain result types: dataclasses mirroring the odeserve.v1 response messages.

Enum fields are strings holding the proto enum value's name (``"EULER"``, ``"BUDGET"``,
``"EMBEDDING"``, ``"READY"``): the same text as the proto3 JSON mapping and
``odeserve-cli --json``. Durations are ``datetime.timedelta`` (rounded to the microsecond).
"""
import dataclasses
import datetime
import enum
from typing import Any, List, Optional, Tuple


class Solver(enum.IntEnum):
    """odeserve.v1.Solver. Methods also take the names as strings, in any case."""
    UNSPECIFIED = 0  # the server's choice (Euler unless a budget picks otherwise)
    EULER = 1  # 1 field evaluation per step
    HEUN = 2  # 2 field evaluations per step
    RK4 = 3  # 4 field evaluations per step


class BudgetMissPolicy(enum.IntEnum):
    """odeserve.v1.BudgetMissPolicy. Methods also take ``"serve_floor"`` / ``"refuse"``."""
    UNSPECIFIED = 0  # SERVE_FLOOR
    SERVE_FLOOR = 1  # serve the cheapest allowed choice and report budget_met=False
    REFUSE = 2  # fail at once with DEADLINE_EXCEEDED


@dataclasses.dataclass(frozen=True)
class ComputeReport:
    """What ran for a call (odeserve.v1.ComputeReport)."""
    steps: int
    solver: str  # "EULER", "HEUN", "RK4"
    step_size: float  # dt = trained_depth / steps
    field_evaluations: int
    queue_time: datetime.timedelta
    compute_time: datetime.timedelta
    total_time: datetime.timedelta
    predicted_time: datetime.timedelta
    budget_set: bool
    budget_met: bool
    budget: Optional[datetime.timedelta]  # None when no budget (or deadline) applied
    batch_size: int
    step_choice: str  # "REQUESTED", "MODEL_DEFAULT", "BUDGET", "BUDGET_FLOOR"
    device: str
    tokens: int
    truncated_inputs: int
    # Translation only (0 otherwise).
    decoder_steps: int
    decoder_step_size: float
    beam_size: int
    output_tokens: int


@dataclasses.dataclass(frozen=True)
class EmbedResult:
    model: str
    # numpy.ndarray float32 [N, D] when numpy is importable, else N lists of D floats.
    embeddings: Any
    report: ComputeReport


@dataclasses.dataclass(frozen=True)
class ClassifyResult:
    model: str
    labels: List[List[Tuple[str, float]]]  # per input: (label, probability), best first
    report: ComputeReport


@dataclasses.dataclass(frozen=True)
class TranslateResult:
    model: str
    translations: List[str]
    scores: List[float]  # log-probability / tokens ^ length_penalty, one per translation
    report: ComputeReport


@dataclasses.dataclass(frozen=True)
class TranslateStreamMessage:
    """One message of translate_stream (odeserve.v1.TranslateStreamResponse)."""
    index: int  # which input
    text: str  # its translation so far (complete when final)
    final: bool
    score: float  # final messages only
    report: Optional[ComputeReport]  # the call's last message only, else None


@dataclasses.dataclass(frozen=True)
class QualityPoint:
    solver: str
    steps: int
    metric: str
    value: float
    dataset: str
    decoder_steps: int
    beam_size: int


@dataclasses.dataclass(frozen=True)
class CostModel:
    fixed_seconds: float
    per_row_seconds: float
    per_token_seconds: float
    per_token_evaluation_seconds: float
    calibration_samples: int
    online_samples: int
    mean_abs_relative_error: float
    latency_inflation: float
    per_decoder_call_seconds: float
    per_decoder_row_evaluation_seconds: float


@dataclasses.dataclass(frozen=True)
class TranslationInfo:
    decoder_trained_depth: int
    min_decoder_steps: int
    max_decoder_steps: int
    default_decoder_steps: int
    max_output_tokens: int
    max_beam_size: int
    source_language: str
    target_language: str
    length_penalty: float


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """One model the server holds (odeserve.v1.ModelInfo)."""
    name: str
    task: str  # "EMBEDDING", "CLASSIFICATION", "TRANSLATION"
    version: str
    family: str
    labels: List[str]
    languages: List[str]
    embedding_dimension: int
    hidden_size: int
    trained_depth: int
    solvers: List[str]
    min_steps: int
    max_steps: int
    default_steps: int
    max_sequence_length: int
    max_batch_size: int
    max_inputs_per_request: int
    quality_profile: List[QualityPoint]
    cost_model: Optional[CostModel]
    parameters: int
    size_bytes: int
    device: str
    state: str  # "LOADING", "READY", "FAILED"
    error: str
    description: str
    translation: Optional[TranslationInfo]  # TRANSLATION models only, else None
    compute_precision: str  # "FLOAT32", "BFLOAT16"
    pad_to_multiple: int
    continuous_batching: bool
    quality_tolerance: float
    quality_profile_measured: bool
    default_steps_source: str  # "config", "profile", "trained_depth"
