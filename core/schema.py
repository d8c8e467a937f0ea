"""The run's data contracts: the rollout record (a parquet row) and the metrics document (metrics.json).

Every metric is computed from the rollout records, one parquet row per rollout, and nothing else.

`RolloutRecord` is the one declaration of the row: the Arrow schema of the batch files is derived from
its fields, so the two cannot drift. Nested values (messages, transcripts, sampling parameters, env
info) are stored as JSON text so that every batch file has the same flat schema regardless of
benchmark, and DuckDB can read all of a run's files in one scan. Every file carries its schema version
in its key-value metadata; `check_schema_version` is the one place that decides whether a file can be read.
"""

from __future__ import annotations

import io
import json
import types
import typing
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, cast

import pyarrow.parquet  # pyright: ignore[reportMissingTypeStubs]  # pyarrow ships no type stubs
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.fields import FieldInfo

from core.migrate import env_metrics_of_schema_2, strip_unknown
from errors import EvalflowError

pa, pq = cast(Any, pyarrow), cast(Any, pyarrow.parquet)  # pyarrow has no type stubs: its objects are Any here

# Version 1: the files written before versions were recorded (no metadata key, the same columns).
# 3: reasoning apart from the answer (reasoning, reasoning_tokens, answer_tokens, ended_in_reasoning); in older
# files `completion` holds the whole text, think block included (core.reasoning splits it when they are rescored).
ROLLOUT_SCHEMA_VERSION = 3
SCHEMA_VERSION_KEY = b"evalflow.schema_version"
# Version 3: env_metrics (declared by the environments) replace info_rates / info_outcomes.
# 4: ci.accuracy clustered by prompt, accuracy_stderr, majority_vote. 5: metrics.json is a core.record.RunRecord
# (typed run_info and comparison); every document model refuses unknown keys. 6: `reasoning` per benchmark, the
# reasoning_tokens / answer_tokens distributions, parse_error_rate without the rollouts cut off while reasoning.
METRICS_SCHEMA_VERSION = 6


class SchemaVersionError(EvalflowError, ValueError):
    """A file was written by a newer evalflow than this one (or carries an unreadable version)."""

    kind = "store"


class _JsonText:
    """Marks a column stored as JSON text."""


JSON = _JsonText()


class RolloutRecord(BaseModel):
    """One rollout: what was asked, what came back, and the environment's verdict."""

    model_config = ConfigDict(extra="forbid")

    run_id: str = Field(description="the run that collected the rollout (a batch reused from the cache keeps it)")
    benchmark: str = Field(description="the benchmark's environment name, e.g. gsm8k")
    env_version: str = Field(description="the environment's version (bumped on any scoring or prompt change)")
    batch_key: str = Field(description="content key of the batch the rollout was collected in")
    prompt_id: str = Field(description="stable id of the dataset row, unique within the benchmark")
    repeat: Annotated[int, pa.int32()] = Field(description="0-based index of this sample of the prompt")
    seed: int = Field(description="sampling seed sent to the server: a stable hash of (base seed, prompt, repeat)")
    model: str = Field(description="the served model name")
    model_fingerprint: str = Field(description="content hash of the converted checkpoint's files")
    sampling: Annotated[dict[str, Any], JSON] = Field(description="sampling parameters (JSON object)")
    messages: Annotated[list[dict[str, Any]] | str, JSON] = Field(
        description="the opening chat messages (JSON list), or the plain-completion prompt (JSON string)"
    )
    completion: str | None = Field(
        None,
        description="the last assistant answer (after its reasoning: what the environment scored); null when a "
        "single-turn rollout's request failed",
    )
    reasoning: str | None = Field(
        None,
        description="the last assistant turn's reasoning (its think block, without the tags); null when it has none",
    )
    transcript: Annotated[list[dict[str, Any]] | str | None, JSON] = Field(
        None,
        description="the whole conversation incl. the completion and tool messages (JSON list), or the plain "
        "prompt plus completion (JSON string); null when a single-turn rollout's request failed",
    )
    finish_reason: str | None = Field(None, description="the last response's finish reason (stop, length, ...)")
    prompt_tokens: int | None = Field(None, description="prompt tokens, summed over the turns of a conversation")
    completion_tokens: int | None = Field(None, description="generated tokens, summed over the turns")
    reasoning_tokens: int | None = Field(
        None,
        description="generated tokens that were reasoning, summed over the turns: the server's count (a reasoning "
        "parser's); 0 without reasoning; null when the server did not count it",
    )
    answer_tokens: int | None = Field(
        None, description="generated tokens that were the answer: completion_tokens - reasoning_tokens"
    )
    ended_in_reasoning: bool | None = Field(
        None,
        description="the completion was cut off while reasoning (no end tag; no answer): reward 0 whatever the "
        "reasoning says; null in files of schema version 2 and older",
    )
    turns: Annotated[int, pa.int32()] = Field(description="assistant turns")
    tool_calls: Annotated[int, pa.int32()] = Field(description="tool calls the environment executed")
    latency_s: float | None = Field(None, description="seconds spent in requests, summed over the turns")
    reward: float = Field(description="the environment's reward (analysis counts an errored rollout as 0)")
    success: bool = Field(description="the environment's verdict (analysis counts an errored rollout as false)")
    parsed_answer: str | None = Field(None, description="the answer taken from the completion; null when none")
    reference: str | None = Field(None, description="the reference answer")
    error: str | None = Field(None, description="why the rollout failed ('Type: message'); null when it completed")
    info: Annotated[dict[str, Any], JSON] = Field(
        description="environment-specific details (JSON object); its keys are described by the env's metrics"
    )
    created_at: datetime = Field(description="when the batch file was written (UTC, milliseconds)")

    @field_validator("*", mode="before")
    @classmethod
    def _decode_json(cls, value: Any, info: ValidationInfo) -> Any:
        # JSON columns given as text (as read back from a file, or pre-encoded) are the encoded value.
        if isinstance(value, str) and info.field_name in JSON_COLUMNS:
            return json.loads(value)
        return value

    def to_row(self) -> dict[str, Any]:
        """The row as stored: JSON columns encoded."""
        return {name: to_json(value) if name in JSON_COLUMNS and value is not None else value for name, value in self}


_ARROW_TYPES: dict[Any, Any] = {
    str: pa.string(),
    int: pa.int64(),
    float: pa.float64(),
    bool: pa.bool_(),
    datetime: pa.timestamp("ms", tz="UTC"),
}


def _arrow_field(name: str, info: FieldInfo) -> Any:
    args = typing.get_args(info.annotation) if isinstance(info.annotation, types.UnionType) else ()
    nullable = type(None) in args
    explicit = [m for m in info.metadata if isinstance(m, pa.DataType)]
    if explicit:
        arrow_type = explicit[0]
    elif JSON in info.metadata:
        arrow_type = pa.string()
    else:
        arrow_type = _ARROW_TYPES[next(a for a in args if a is not type(None)) if args else info.annotation]
    return pa.field(name, arrow_type, nullable=nullable)


JSON_COLUMNS = tuple(name for name, info in RolloutRecord.model_fields.items() if JSON in info.metadata)
ROLLOUT_SCHEMA = pa.schema(
    [_arrow_field(name, info) for name, info in RolloutRecord.model_fields.items()],
    metadata={SCHEMA_VERSION_KEY: str(ROLLOUT_SCHEMA_VERSION).encode()},
)
COLUMN_DOCS = {name: info.description or "" for name, info in RolloutRecord.model_fields.items()}


def to_json(value: Any) -> str:
    """Deterministic JSON for the nested columns (sorted keys keep files byte-stable)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def to_table(rows: Iterable[RolloutRecord | Mapping[str, Any]]) -> Any:
    """A batch table (a pyarrow.Table): each row checked against RolloutRecord, nested columns encoded, the version in
    the schema metadata."""
    records = [row if isinstance(row, RolloutRecord) else RolloutRecord.model_validate(row) for row in rows]
    return pa.Table.from_pylist([record.to_row() for record in records], schema=ROLLOUT_SCHEMA)


def to_parquet_bytes(rows: Iterable[RolloutRecord | Mapping[str, Any]]) -> bytes:
    """A whole batch file (zstd-compressed parquet), ready for one atomic write."""
    buffer = io.BytesIO()
    pq.write_table(to_table(rows), buffer, compression="zstd")
    return buffer.getvalue()


def check_schema_version(url: str, value: bytes | str | None) -> int:
    """The rollout schema version of the file at `url`, from its metadata value (None: version 1);
    a version this code does not know is refused with a message naming the file."""
    if value is None:
        return 1
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    try:
        version = int(text)
    except ValueError:
        raise SchemaVersionError(
            f"{url}: unreadable rollout schema version {text!r} (metadata key {SCHEMA_VERSION_KEY.decode()})"
        ) from None
    if not 1 <= version <= ROLLOUT_SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{url}: rollout schema version {version} is not supported (this evalflow reads 1 to "
            f"{ROLLOUT_SCHEMA_VERSION}); analyse it with a newer evalflow"
        )
    return version


# ---------------------------------------------------------------------------------------------
# The metrics document (metrics.json): what tasks/analysis computes and tasks/reporting renders.
# Field names are the JSON keys; tasks/analysis/metrics.py's module doc says how each is computed.


class _Doc(BaseModel):
    # An unknown key is a bug in what evalflow wrote (a mistyped key would otherwise vanish and its field take
    # its default). Older documents lack newer fields (defaults fill them); the keys a later version retired
    # are dropped by RunMetrics.migrate before validation.
    model_config = ConfigDict(extra="forbid")


class Interval(_Doc):
    """A Wilson score interval; `low`/`high` are null where it is undefined (no data)."""

    low: float | None = None
    high: float | None = None
    n: int = 0
    method: str = "wilson"


class BootstrapInterval(Interval):
    """A seeded percentile bootstrap over prompts; null bounds with fewer than 2 prompts."""

    method: str = "bootstrap-prompts"
    resamples: int | None = None
    seed: int | None = None


class ClusteredInterval(Interval):
    """mean +/- 1.96 x the cluster-robust SE over prompts (Miller 2024); `n` counts prompts, `rollouts`
    the rollouts. In documents of schema_version 3 and older, ci.accuracy was a Wilson interval."""

    method: str = "clustered-prompts"
    se: float | None = None
    rollouts: int = 0


class Intervals(_Doc):
    level: float = 0.95
    accuracy: ClusteredInterval = Field(default_factory=ClusteredInterval)
    parse_error_rate: Interval = Field(default_factory=Interval)
    error_rate: Interval = Field(default_factory=Interval)
    pass_at_k: dict[str, Interval] = Field(default_factory=dict)
    maj_at_k: dict[str, Interval] = Field(default_factory=dict)
    mean_reward: BootstrapInterval = Field(default_factory=BootstrapInterval)
    tool_calls_reward_corr: BootstrapInterval | None = None


class Histogram(_Doc):
    edges: list[float]
    counts: list[int]


class Distribution(_Doc):
    count: int
    mean: float | None
    quantiles: dict[str, float | None]  # min, p5, p25, p50, p75, p95, p99, max
    histogram: Histogram


class RewardStats(_Doc):
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    median: float | None = None
    std: float | None = None
    mode: float | None = None
    mode_share: float | None = None


class RewardValues(_Doc):
    distinct: int = 0
    truncated: bool = False
    values: list[tuple[float, int]] = Field(default_factory=list)  # (value rounded to 6 places, count)


class PromptCount(_Doc):
    count: int = 0


class PromptGroup(PromptCount):
    ids: list[str] = Field(default_factory=list)


class PromptOutcomes(_Doc):
    never_succeed: PromptGroup = Field(default_factory=PromptGroup)
    always_succeed: PromptGroup = Field(default_factory=PromptGroup)
    mixed: PromptCount = Field(default_factory=PromptCount)


class TokenStats(_Doc):
    prompt_mean: float | None = None
    prompt_total: int | None = None
    completion_mean: float | None = None
    completion_total: int | None = None


class LatencyStats(_Doc):
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None
    max: float | None = None


class ToolCallStats(_Doc):
    mean: float | None = None
    min: int | None = None
    max: int | None = None
    total: int = 0
    reward_corr: float | None = None


class ToolCallBucket(_Doc):
    tool_calls: int
    n: int
    mean_reward: float | None
    success_rate: float | None
    prompts: int = 0
    mean_reward_ci: ClusteredInterval | None = None


class PromptRow(_Doc):
    prompt_id: str
    n: int
    successes: int
    success_rate: float | None
    mean_reward: float | None
    reference: str | None = None
    top_answer: str | None = None


class EnvMetric(_Doc):
    """A metric an environment declares (envs.base.MetricSpec), computed from its `info` key.

    kind "rate": share of rollouts whose info[key] is true; errored rollouts count as false, completed
    rollouts lacking a boolean value are not counted; `n` is that denominator, `ci` a Wilson interval.
    kind "mean": mean of the numeric info[key] over the completed rollouts that carry one (`n`).
    kind "counts": how often each value of info[key] occurs (`counts`, most frequent first; `n` their sum).
    kind "items": info[key] is a list of booleans (e.g. IFEval's instructions); the share of true items over
    every completed rollout's items (`n` items; lm-eval's instruction-level accuracy), Wilson `ci` over items.
    A metric no rollout carries is left out of the document.
    """

    key: str
    label: str
    kind: Literal["rate", "mean", "counts", "items"]
    headline: bool = False
    description: str = ""
    value: float | None = None  # rate, share of items or mean; null for counts
    n: int = 0
    ci: Interval | None = None
    counts: dict[str, int] | None = None


class ReasoningBucket(_Doc):
    """The rollouts whose reasoning length falls in one quartile of the benchmark's: does longer thinking help?"""

    low: int  # reasoning tokens, inclusive
    high: int
    n: int
    prompts: int
    accuracy: float | None
    ci: ClusteredInterval | None = None


class ReasoningStats(_Doc):
    """A reasoning model's thinking over one benchmark's rollouts: how many reasoned, how many were cut off while
    reasoning (no answer, reward 0; `at_limit` by the token limit; the rate over every rollout, Wilson CI), token
    means over the `counted` ones, accuracy by reasoning-length quartile (`by_length`, clustered by prompt)."""

    with_reasoning: int = 0
    counted: int = 0
    ended_in_reasoning: int = 0
    at_limit: int = 0
    ended_in_reasoning_rate: float | None = None
    ended_in_reasoning_ci: Interval | None = None
    reasoning_tokens_mean: float | None = None
    answer_tokens_mean: float | None = None
    reasoning_share: float | None = None  # reasoning tokens / generated tokens, over the counted rollouts
    by_length: list[ReasoningBucket] = Field(default_factory=list)


class BenchmarkMetrics(_Doc):
    n_prompts: int
    n_rollouts: int
    successes: int
    repeats: dict[str, int]  # min, max
    accuracy: float | None
    mean_reward: float | None
    pass_at_k: dict[str, float | None] = Field(default_factory=dict)
    maj_at_k: dict[str, float | None] = Field(default_factory=dict)  # empty where majority_vote is false
    majority_vote: bool = True  # the environment declares a majority vote over answers meaningful
    accuracy_stderr: float | None = None  # lm-eval's mean_stderr: sample std (ddof 1) / sqrt(rollouts)
    ci: Intervals = Field(default_factory=Intervals)
    reward: RewardStats = Field(default_factory=RewardStats)
    reward_values: RewardValues = Field(default_factory=RewardValues)
    distributions: dict[str, Distribution | None] = Field(default_factory=dict)
    prompt_outcomes: PromptOutcomes = Field(default_factory=PromptOutcomes)
    parse_error_rate: float | None = None
    error_count: int = 0
    error_rate: float | None = None
    errors: dict[str, int] = Field(default_factory=dict)
    finish_reasons: dict[str, int] = Field(default_factory=dict)
    tokens: TokenStats = Field(default_factory=TokenStats)
    latency_s: LatencyStats = Field(default_factory=LatencyStats)
    tool_calls: ToolCallStats = Field(default_factory=ToolCallStats)
    reward_by_tool_calls: list[ToolCallBucket] = Field(default_factory=list)
    per_prompt: list[PromptRow] = Field(default_factory=list)
    env_metrics: list[EnvMetric] = Field(default_factory=list)
    reasoning: ReasoningStats | None = None

    def env_metric(self, key: str) -> EnvMetric | None:
        return next((m for m in self.env_metrics if m.key == key), None)


class RunMetrics(_Doc):
    """The metrics of a run's benchmarks, as the analysis computes them (metrics.json is a core.record.RunRecord:
    these fields plus `run_info` and `comparison`)."""

    schema_version: int = METRICS_SCHEMA_VERSION
    total_rollouts: int = 0
    duplicate_rollouts: int = 0
    benchmarks: dict[str, BenchmarkMetrics] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        return cls.migrate(cast(dict[str, Any], data)) if isinstance(data, dict) else data

    @classmethod
    def migrate(cls, data: dict[str, Any]) -> dict[str, Any]:
        """A document of an older schema version in today's shape (its schema_version kept: the comparison
        reads old intervals by it): schema-2 info rates as env metrics, retired keys dropped."""
        if data.get("schema_version", METRICS_SCHEMA_VERSION) >= METRICS_SCHEMA_VERSION:
            return data
        benchmarks = {
            name: env_metrics_of_schema_2(cast(dict[str, Any], bm)) if isinstance(bm, dict) else bm
            for name, bm in cast(dict[str, Any], data.get("benchmarks") or {}).items()
        }
        return strip_unknown(cls, {**data, "benchmarks": benchmarks})

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, version: int) -> int:
        if version > METRICS_SCHEMA_VERSION:
            raise ValueError(
                f"metrics schema_version {version} is newer than this evalflow reads ({METRICS_SCHEMA_VERSION})"
            )
        return version
