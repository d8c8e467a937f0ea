"""The run's data contracts: the rollout record (one parquet row per rollout, the only input of every
metric) and the metrics document (metrics.json) computed from those rows.

Nested values (messages, transcripts, sampling parameters, env info) are stored as JSON strings so
that every batch file has the same flat schema regardless of benchmark, and DuckDB can read all of
a run's files in one scan.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

# Version of the metrics document below; tasks/analysis writes it, readers check it.
METRICS_SCHEMA_VERSION = 3

ROLLOUT_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("benchmark", pa.string(), nullable=False),
        pa.field("env_version", pa.string(), nullable=False),
        pa.field("batch_key", pa.string(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("repeat", pa.int32(), nullable=False),
        pa.field("seed", pa.int64(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("model_fingerprint", pa.string(), nullable=False),
        pa.field("sampling", pa.string(), nullable=False),  # JSON object
        pa.field("messages", pa.string(), nullable=False),  # JSON: chat messages (list) or a prompt (string)
        pa.field("completion", pa.string()),  # final assistant text; null on error
        pa.field("transcript", pa.string()),  # JSON list: the whole conversation incl. the completion
        pa.field("finish_reason", pa.string()),
        pa.field("prompt_tokens", pa.int64()),
        pa.field("completion_tokens", pa.int64()),
        pa.field("turns", pa.int32(), nullable=False),
        pa.field("tool_calls", pa.int32(), nullable=False),
        pa.field("latency_s", pa.float64()),
        pa.field("reward", pa.float64(), nullable=False),
        pa.field("success", pa.bool_(), nullable=False),
        pa.field("parsed_answer", pa.string()),
        pa.field("reference", pa.string()),
        pa.field("error", pa.string()),  # null when the rollout completed
        pa.field("info", pa.string(), nullable=False),  # JSON object, env-specific
        pa.field("created_at", pa.timestamp("ms", tz="UTC"), nullable=False),
    ]
)

JSON_COLUMNS = ("sampling", "messages", "transcript", "info")


def to_json(value: Any) -> str:
    """Deterministic JSON for the nested columns (sorted keys keep files byte-stable)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def to_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Build a batch table, encoding nested columns and enforcing the schema."""
    encoded = []
    for row in rows:
        row = dict(row)
        for col in JSON_COLUMNS:
            value = row.get(col)
            if value is not None and not isinstance(value, str):
                row[col] = to_json(value)
        encoded.append(row)
    return pa.Table.from_pylist(encoded, schema=ROLLOUT_SCHEMA)


# ---------------------------------------------------------------------------------------------
# The metrics document (metrics.json): what tasks/analysis computes and tasks/reporting renders.
# Field names are the JSON keys; the analysis module doc says how each number is computed.


class _Doc(BaseModel):
    # Older documents (schema_version 2) lack newer fields (defaults fill them); unknown keys are kept
    # out rather than failing a report of an old run.
    model_config = ConfigDict(extra="ignore")


class Interval(_Doc):
    """A confidence interval; `low`/`high` are null where it is undefined (no data, < 2 prompts)."""

    low: float | None = None
    high: float | None = None
    n: int = 0
    method: str = "wilson"
    resamples: int | None = None
    seed: int | None = None


class Intervals(_Doc):
    level: float = 0.95
    accuracy: Interval = Field(default_factory=Interval)
    parse_error_rate: Interval = Field(default_factory=Interval)
    error_rate: Interval = Field(default_factory=Interval)
    pass_at_k: dict[str, Interval] = Field(default_factory=dict)
    maj_at_k: dict[str, Interval] = Field(default_factory=dict)
    mean_reward: Interval = Field(default_factory=Interval)


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


class PromptGroup(_Doc):
    count: int = 0
    ids: list[str] = Field(default_factory=list)


class PromptOutcomes(_Doc):
    never_succeed: PromptGroup = Field(default_factory=PromptGroup)
    always_succeed: PromptGroup = Field(default_factory=PromptGroup)
    mixed: PromptGroup = Field(default_factory=PromptGroup)


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

    kind "rate": share of rollouts whose info[key] is true (errored rollouts count as false,
    completed rollouts lacking the key are not counted), with a Wilson interval; kind "mean": mean of
    a numeric info[key]; kind "counts": how often each value of a categorical info[key] occurs.
    """

    key: str
    label: str
    kind: Literal["rate", "mean", "counts"]
    headline: bool = False
    description: str = ""
    value: float | None = None  # rate or mean; null for counts
    n: int = 0  # rollouts that carry the key
    ci: Interval | None = None
    counts: dict[str, int] | None = None  # kind "counts": value -> rollouts, most frequent first


class BenchmarkMetrics(_Doc):
    n_prompts: int
    n_rollouts: int
    successes: int
    repeats: dict[str, int]  # min, max
    accuracy: float | None
    mean_reward: float | None
    pass_at_k: dict[str, float | None] = Field(default_factory=dict)
    maj_at_k: dict[str, float | None] = Field(default_factory=dict)
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

    def env_metric(self, key: str) -> EnvMetric | None:
        return next((m for m in self.env_metrics if m.key == key), None)


class RunMetrics(_Doc):
    """metrics.json without the report's additions (`run_info`, `comparison`)."""

    schema_version: int = METRICS_SCHEMA_VERSION
    total_rollouts: int = 0
    duplicate_rollouts: int = 0
    benchmarks: dict[str, BenchmarkMetrics] = Field(default_factory=dict)
