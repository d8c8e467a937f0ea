"""Run metrics: DuckDB SQL over a run's batch parquet files, and nothing else.

Every number in a report comes from here, computed from the rollout records (core/schema.py), so
a report can always be recomputed from the files. The heavy lifting (deduplication, per-prompt and
per-answer aggregation, histograms) happens in SQL (tasks/analysis/queries.py, env_metrics.py), whose
typed rows Python shapes (a few thousand of them) into the document's models, `core.metrics_doc.RunMetrics`,
built field by field.

Conventions that matter for reading the numbers:

- An errored rollout (``error`` not null) is a failure with reward 0, whatever its row says.
- Rows repeating a (benchmark, prompt_id, repeat) (e.g. a stale batch file left beside its rerun)
  are counted once, keeping the newest ``created_at``; ``duplicate_rollouts`` says how many went.
- Files are read through their rollout schema version (tasks/analysis/load.py): version 1 (no
  version in the metadata) and 2 read the same; a newer version is refused, naming the file.
- pass@k is the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` averaged over prompts with n >= k.
- maj@k (only for benchmarks whose environment declares ``majority_vote``; ``maj_at_k`` is empty
  for the others, e.g. games and programs) takes the most common non-null ``parsed_answer`` among a
  prompt's first k repeats (ordered by repeat index); a tie goes to the answer that occurred first.
  The winner is correct when it equals the reference (trimmed strings), or when some rollout of the
  same prompt with the same parsed answer succeeded (the environment's own judgement, which covers equivalent
  forms such as ``1/2`` and ``0.5``). A prompt whose first k answers are all null counts as wrong.
- ``env_metrics`` are the metrics the benchmark's environment declares (envs.base.MetricSpec, passed
  in as `specs`; core.metrics_doc.EnvMetric has the rules): a rate counts errored rollouts as false and
  leaves out completed rollouts lacking the key; a mean averages the completed rollouts' numbers;
  counts tally every rollout's value, most frequent first. A benchmark without specs gets none.
- ``reward.std`` is the population standard deviation.

Confidence intervals (all 95%, in ``ci``, and each env rate's own ``ci``):

- ``accuracy`` is clustered by prompt (Miller 2024, "Adding Error Bars to Evals"): SE =
  sqrt(sum_i (sum_j (x_ij - mean))^2) / N over prompts i and their rollouts j (N rollouts), the CI is
  mean +/- 1.96 SE clipped to [0, 1], null with fewer than 2 prompts. A prompt's repeats are
  correlated (same difficulty), so a Wilson interval over rollouts would be far too narrow with many
  repeats. ``accuracy_stderr`` is lm-eval's ``mean_stderr`` (sample std / sqrt(rollouts); over prompts
  when each has one rollout), for comparison with lm-eval numbers: it ignores the clustering.
- ``pass_at_k``/``maj_at_k`` keep Wilson intervals over prompts (n = prompts with >= k repeats): each
  prompt contributes one value in [0, 1] whose variance is at most p(1-p), and prompts are independent,
  so the interval is valid (conservative). ``parse_error_rate``, ``error_rate`` and the env rates are
  Wilson intervals over rollouts, which understate the uncertainty when repeats are many.
- Mean reward uses a seeded percentile bootstrap that resamples *prompts* (with all their rollouts).
- ``tool_calls_reward_corr``: the same bootstrap over prompts of Pearson's r (from per-prompt moments).
  Fisher's z would assume independent, bivariate-normal pairs; rollouts of a prompt are not
  independent and rewards are far from normal (a few large wins), so resampling prompts is the honest
  choice. Each ``reward_by_tool_calls`` bucket's ``mean_reward_ci`` is clustered by prompt like accuracy
  (not clipped; ``prompts`` is its cluster count).

The document's keys are core/metrics_doc.py's models (README's "Reading a run" lists them); metrics.json
is ``RunMetrics.model_dump(mode="json")`` plus the report's ``run_info`` and ``comparison``.

Floats are rounded to 12 significant digits (parallel float sums differ in their last bits from
scan to scan; rounded, the same rollouts always give identical metrics). Histograms have
``HISTOGRAM_BINS`` equal-width bins from min to max (integer-wide for token counts); ``reward_values``
keeps the ``MAX_REWARD_VALUES`` most common values when there are more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel

from core.metrics_doc import (
    BenchmarkMetrics,
    BootstrapInterval,
    Distribution,
    EnvMetric,
    Intervals,
    LatencyStats,
    PromptCount,
    PromptGroup,
    PromptOutcomes,
    PromptRow,
    RewardStats,
    RewardValues,
    RunMetrics,
    TokenStats,
    ToolCallBucket,
    ToolCallStats,
)
from core.store import Store
from envs.base import MetricSpec
from envs.registry import find_env
from tasks.analysis import queries
from tasks.analysis.env_metrics import env_keys, env_metrics, headline_rates_by_prompt
from tasks.analysis.load import connect, load
from tasks.analysis.queries import Overview, PromptStats, RewardValue, ToolCallGroup
from tasks.analysis.reasoning import (
    ReasoningLengthRow,
    ReasoningRow,
    reasoning_by_length,
    reasoning_rows,
    reasoning_stats,
)
from tasks.analysis.stats import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CI_LEVEL,
    AtK,
    bootstrap_corr_ci,
    bootstrap_mean_ci,
    clustered_interval,
    ks_for,
    pass_at_k,
    wilson_ci,
)

FLOAT_DIGITS = 12  # significant digits kept in metrics (see _rounded)

Specs = Mapping[str, Sequence[MetricSpec]]
T = TypeVar("T")


@dataclass(frozen=True)
class Found:
    """What the queries found for one benchmark, besides its overview and prompts."""

    majority_vote: bool
    maj: dict[str, AtK]
    reward_values: list[RewardValue]
    distributions: dict[str, Distribution | None]
    errors: dict[str, int]
    finish_reasons: dict[str, int]
    by_tool_calls: list[ToolCallGroup]
    tool_moments: np.ndarray | None
    env_metrics: list[EnvMetric]
    reasoning: ReasoningRow | None = None
    by_length: list[ReasoningLengthRow] | None = None


def _pass_at_ks(per_prompt: list[PromptStats], ks: list[int]) -> dict[str, AtK]:
    """Average the per-prompt estimator over prompts with enough repeats; (value, prompts) per k.

    Prompts are grouped by (n, c) first: thousands of prompts share a few hundred pairs.
    """
    pairs = Counter((p.n, p.successes) for p in per_prompt)
    out: dict[str, AtK] = {}
    for k in ks:
        eligible = [(n, c, m) for (n, c), m in pairs.items() if n >= k]
        total = sum(m for _, _, m in eligible)
        value = sum(pass_at_k(n, c, k) * m for n, c, m in eligible) / total if total else None
        out[str(k)] = AtK(value, total)
    return out


def _prompt_outcomes(per_prompt: list[PromptStats]) -> PromptOutcomes:
    never = [p.prompt_id for p in per_prompt if p.successes == 0]
    always = [p.prompt_id for p in per_prompt if p.successes == p.n]
    return PromptOutcomes(
        never_succeed=PromptGroup(count=len(never), ids=never),
        always_succeed=PromptGroup(count=len(always), ids=always),
        mixed=PromptCount(count=len(per_prompt) - len(never) - len(always)),
    )


def _reward_values(found: list[RewardValue]) -> RewardValues:
    distinct = found[0].distinct_values if found else 0
    return RewardValues(distinct=distinct, truncated=distinct > len(found), values=[(r.value, r.count) for r in found])


def _bootstrap(low: float | None, high: float | None, n: int) -> BootstrapInterval:
    return BootstrapInterval(
        low=low, high=high, n=n, method="bootstrap-prompts", resamples=BOOTSTRAP_RESAMPLES, seed=BOOTSTRAP_SEED
    )


def _cis(
    ov: Overview,
    passk: dict[str, AtK],
    maj: dict[str, AtK],
    per_prompt: list[PromptStats],
    tool_moments: np.ndarray | None,
) -> Intervals:
    n = ov.n_rollouts
    low, high = bootstrap_mean_ci(np.array([p.reward_sum for p in per_prompt]), np.array([p.n for p in per_prompt]))
    corr = None
    if tool_moments is not None and ov.tool_calls_reward_corr is not None:
        corr = _bootstrap(*bootstrap_corr_ci(tool_moments), len(tool_moments))
    return Intervals(
        level=CI_LEVEL,
        accuracy=clustered_interval(ov.accuracy, ov.accuracy_se, ov.n_prompts, n, clip=True),
        parse_error_rate=wilson_ci(ov.parse_error_rate, n),
        error_rate=wilson_ci(ov.error_rate, n),
        pass_at_k={k: wilson_ci(v, m) for k, (v, m) in passk.items()},
        maj_at_k={k: wilson_ci(v, m) for k, (v, m) in maj.items()},
        mean_reward=_bootstrap(low, high, len(per_prompt)),
        tool_calls_reward_corr=corr,
    )


def _buckets(found: list[ToolCallGroup]) -> list[ToolCallBucket]:
    """Mean reward by tool-call count, each with its CI clustered by prompt (see module doc)."""
    return [
        ToolCallBucket(
            tool_calls=row.tool_calls,
            n=row.n,
            prompts=row.prompts,
            mean_reward=row.mean_reward,
            success_rate=row.success_rate,
            mean_reward_ci=clustered_interval(row.mean_reward, row.se, row.prompts, row.n, clip=False),
        )
        for row in found
    ]


def _prompt_row(p: PromptStats, rates: dict[str, tuple[int, int]]) -> PromptRow:
    return PromptRow(
        prompt_id=p.prompt_id,
        n=p.n,
        successes=p.successes,
        success_rate=p.success_rate,
        mean_reward=p.mean_reward,
        reference=p.reference,
        top_answer=p.top_answer,
        prompt_hash=p.prompt_hash,
        rates=rates,
    )


def _benchmark_metrics(
    ov: Overview, per_prompt: list[PromptStats], found: Found, rates: dict[str, dict[str, tuple[int, int]]]
) -> BenchmarkMetrics:
    repeats = {"min": min(p.n for p in per_prompt), "max": max(p.n for p in per_prompt)}
    passk = _pass_at_ks(per_prompt, ks_for(repeats["max"]))
    mode = max(found.reward_values, key=lambda v: (v.count, -v.value), default=None)
    p50, p90, p99 = ov.latency_q or (None, None, None)
    return BenchmarkMetrics(
        n_prompts=ov.n_prompts,
        n_rollouts=ov.n_rollouts,
        successes=ov.successes,
        repeats=repeats,
        accuracy=ov.accuracy,
        accuracy_stderr=ov.accuracy_stderr,
        majority_vote=found.majority_vote,
        mean_reward=ov.mean_reward,
        pass_at_k={k: v.value for k, v in passk.items()},
        maj_at_k={k: v.value for k, v in found.maj.items()},
        ci=_cis(ov, passk, found.maj, per_prompt, found.tool_moments),
        reward=RewardStats(
            min=ov.reward_min,
            max=ov.reward_max,
            mean=ov.mean_reward,
            median=ov.reward_median,
            std=ov.reward_std,
            mode=mode.value if mode else None,
            mode_share=mode.count / ov.n_rollouts if mode else None,
        ),
        reward_values=_reward_values(found.reward_values),
        distributions=found.distributions,
        prompt_outcomes=_prompt_outcomes(per_prompt),
        parse_error_rate=ov.parse_error_rate,
        error_count=ov.error_count,
        error_rate=ov.error_rate,
        errors=found.errors,
        finish_reasons=found.finish_reasons,
        tokens=TokenStats(
            prompt_mean=ov.prompt_mean,
            prompt_total=ov.prompt_total,
            completion_mean=ov.completion_mean,
            completion_total=ov.completion_total,
        ),
        latency_s=LatencyStats(p50=p50, p90=p90, p99=p99, mean=ov.latency_mean, max=ov.latency_max),
        tool_calls=ToolCallStats(
            mean=ov.tool_calls_mean,
            min=ov.tool_calls_min,
            max=ov.tool_calls_max,
            total=ov.tool_calls_total,
            reward_corr=ov.tool_calls_reward_corr,
        ),
        reward_by_tool_calls=_buckets(found.by_tool_calls),
        per_prompt=[_prompt_row(p, rates.get(p.prompt_id, {})) for p in per_prompt],
        env_metrics=found.env_metrics,
        reasoning=reasoning_stats(found.reasoning, found.by_length),
    )


def majority_votes(names: Iterable[str]) -> dict[str, bool]:
    """Whether each named benchmark's environment declares maj@k meaningful (envs.base.Env.majority_vote);
    a name with no environment here (a benchmark of an older run, say) votes, as before the declaration."""
    return {name: cls.majority_vote if (cls := find_env(name)) else True for name in names}


def compute_metrics(
    files: list[str], store: Store, specs: Specs | None = None, votes: Collection[str] | None = None
) -> RunMetrics:
    """The run metrics of the batch parquet files (see module doc); `specs` are the metrics each
    benchmark's environment declares (envs.registry.metric_specs), keyed by benchmark name; `votes` the
    benchmarks that get maj@k (default: those whose environment declares it, see majority_votes)."""
    if not files:
        return RunMetrics()
    con = connect(files, store)
    try:
        duplicates = load(con, files, env_keys(specs or {}))
        con.execute(queries.PROMPTS_SQL)
        overview = queries.overview(con)
        if not overview:
            return RunMetrics(duplicate_rollouts=duplicates)
        if votes is None:
            votes = {name for name, vote in majority_votes(overview).items() if vote}
        repeats_max = queries.repeats_max(con)
        maj = queries.maj_at_ks(con, {b: ks_for(n) for b, n in repeats_max.items() if b in votes})
        per_prompt = queries.per_prompt(con)
        values = queries.reward_values(con)
        finish = queries.counts(con, queries.FINISH_REASONS_SQL)
        errors = queries.counts(con, queries.ERRORS_SQL)
        by_tools = queries.by_tool_calls(con)
        tool_moments = {b: queries.tool_moments(con, b) for b, ov in overview.items() if ov.tool_calls_max}
        wanted = {name: (specs or {}).get(name, ()) for name in overview}
        declared = env_metrics(con, wanted, {b: ov.error_count for b, ov in overview.items()})
        rates_by_prompt = headline_rates_by_prompt(con, wanted)
        distributions = queries.distributions(con)
        reasoning = reasoning_rows(con)
        by_length = reasoning_by_length(con)
    finally:
        con.close()
    benchmarks = {}
    for name, ov in overview.items():
        found = Found(
            majority_vote=name in votes,
            maj=maj.get(name, {}),
            reward_values=values.get(name, []),
            distributions=distributions.get(name, {}),
            errors=errors.get(name, {}),
            finish_reasons=finish.get(name, {}),
            by_tool_calls=by_tools.get(name, []),
            tool_moments=tool_moments.get(name),
            env_metrics=declared.get(name, []),
            reasoning=reasoning.get(name),
            by_length=by_length.get(name),
        )
        benchmarks[name] = _rounded(_benchmark_metrics(ov, per_prompt[name], found, rates_by_prompt.get(name, {})))
    return RunMetrics(
        total_rollouts=sum(b.n_rollouts for b in benchmarks.values()),
        duplicate_rollouts=duplicates,
        benchmarks=benchmarks,
    )


def _rounded(value: T) -> T:
    """Floats to FLOAT_DIGITS significant digits, recursively: DuckDB sums in parallel, in whatever
    order the threads deliver rows, so the last bits of a mean vary from scan to scan; rounded, the
    same rollouts always give identical metrics (locally or from S3, today or on a rerun).

    A document model is rounded in place (its fields replaced by their rounded values: the same types,
    so nothing to validate again); the document is freshly built and nothing else holds it yet."""
    if isinstance(value, float):
        return cast(T, float(f"{value:.{FLOAT_DIGITS}g}"))
    if isinstance(value, BaseModel):
        fields: dict[str, Any] = vars(value)
        for name, field in fields.items():
            fields[name] = _rounded(field)
        return value
    if isinstance(value, dict):
        return cast(T, {k: _rounded(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return type(value)(_rounded(v) for v in value)
    return value


# Prefect task wrapper (no cache: the inputs are file lists and a store, and analysis is cheap next to
# the rollouts it summarises)


@task(name="analyze-rollouts", cache_policy=NO_CACHE)
def analyze_task(
    files: list[str], store: Store, specs: Specs | None = None, votes: Collection[str] | None = None
) -> RunMetrics:
    """Compute the run metrics inside a flow."""
    metrics = compute_metrics(files, store, specs, votes)
    get_run_logger().info(
        "analyzed %d rollouts from %d files over %d benchmarks",
        metrics.total_rollouts,
        len(files),
        len(metrics.benchmarks),
    )
    return metrics
