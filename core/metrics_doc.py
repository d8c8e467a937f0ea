"""The metrics document (metrics.json): what tasks/analysis computes and tasks/reporting renders.

Field names are the JSON keys; tasks/analysis/metrics.py's module doc says how each is computed. Every document
model refuses unknown keys; older documents are read through `RunMetrics.migrate`.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core.migrate import env_metrics_of_schema_2, strip_unknown

# Version 3: env_metrics (declared by the environments) replace info_rates / info_outcomes.
# 4: ci.accuracy clustered by prompt, accuracy_stderr, majority_vote. 5: metrics.json is a core.record.RunRecord
# (typed run_info and comparison); every document model refuses unknown keys. 6: `reasoning` per benchmark, the
# reasoning_tokens / answer_tokens distributions, parse_error_rate without the rollouts cut off while reasoning.
# 7: per_prompt rows carry prompt_hash (a paired comparison matches prompts by id and content) and the headline
# env rates' counts; comparison rows
# carry their paired statistics, the smallest detectable change and the flipped prompts.
METRICS_SCHEMA_VERSION = 7


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
    the rollouts. Where every prompt scored the same rate (the SE is 0), Wilson's interval over the prompts
    (method `wilson-prompts`). In documents of schema_version 3 and older, ci.accuracy was a Wilson interval."""

    method: str = "clustered-prompts"  # or "wilson-prompts"
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
    prompt_hash: str | None = None  # md5 of the prompt's opening messages, 16 hex digits; null before schema 7
    rates: dict[str, tuple[int, int]] = Field(default_factory=dict)  # headline env rate key -> (trues, n) here


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
