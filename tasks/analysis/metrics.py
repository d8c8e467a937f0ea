"""Run metrics: DuckDB SQL over a run's batch parquet files, and nothing else.

Every number in a report comes from here, computed from the rollout records (core/schema.py), so
a report can always be recomputed from the files. The heavy lifting (deduplication, per-prompt and
per-answer aggregation, histograms) happens in SQL (tasks/analysis/queries.py, env_metrics.py); Python
only shapes a few thousand result rows into the typed document, `core.schema.RunMetrics`.

Conventions that matter for reading the numbers:

- An errored rollout (``error`` not null) is a failure with reward 0, whatever its row says.
- Rows repeating a (benchmark, prompt_id, repeat) (e.g. a stale batch file left beside its rerun)
  are counted once, keeping the newest ``created_at``; ``duplicate_rollouts`` says how many went.
- Files are read through their rollout schema version (tasks/analysis/load.py): version 1 (no
  version in the metadata) and 2 read the same; a newer version is refused, naming the file.
- pass@k is the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` averaged over prompts with n >= k.
- maj@k takes the most common non-null ``parsed_answer`` among a prompt's first k repeats (ordered
  by repeat index); a tie goes to the answer that occurred first. The winner is correct when it
  equals the reference (trimmed strings), or when some rollout of the same prompt with the same
  parsed answer succeeded (the environment's own judgement, which covers equivalent forms such as
  ``1/2`` and ``0.5``). A prompt whose first k answers are all null counts as wrong.
- ``env_metrics`` are the metrics the benchmark's environment declares (envs.base.MetricSpec, passed
  in as `specs`; core.schema.EnvMetric has the rules): a rate counts errored rollouts as false and
  leaves out completed rollouts lacking the key; a mean averages the completed rollouts' numbers;
  counts tally every rollout's value, most frequent first. A benchmark without specs gets none.
- ``reward.std`` is the population standard deviation.

Confidence intervals (all 95%, in ``ci``, and each env rate's own ``ci``):

- Rates use the Wilson score interval. ``accuracy``, ``parse_error_rate``, ``error_rate`` and the
  env rates are rates over rollouts (n = rollouts), which treats a prompt's repeats as independent
  and so understates the uncertainty when there are few prompts. ``pass_at_k``/``maj_at_k`` are
  rates over prompts (n = prompts with >= k repeats; each prompt contributes a value in [0, 1]
  whose variance is at most p(1-p), so the Wilson interval over prompts is conservative). With
  equal repeats, pass@1 equals accuracy, and its interval is the one that respects the clustering.
- Mean reward uses a seeded percentile bootstrap that resamples *prompts* (with all their rollouts)
  rather than rollouts, because the rollouts of one prompt are correlated: resampling them
  independently would give a too-narrow interval. Fewer than 2 prompts give no interval (null).

The document's keys are core/schema.py's models (README's "Reading a run" lists them); metrics.json
is ``RunMetrics.model_dump(mode="json")`` plus the report's ``run_info`` and ``comparison``.

Floats are rounded to 12 significant digits (parallel float sums differ in their last bits from
scan to scan; rounded, the same rollouts always give identical metrics). Histograms have
``HISTOGRAM_BINS`` equal-width bins from min to max (integer-wide for token counts); ``reward_values``
keeps the ``MAX_REWARD_VALUES`` most common values when there are more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from core.schema import RunMetrics
from core.store import Store
from envs.base import MetricSpec
from tasks.analysis import queries
from tasks.analysis.env_metrics import env_metrics
from tasks.analysis.load import connect, load
from tasks.analysis.stats import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CI_LEVEL,
    bootstrap_mean_ci,
    ks_for,
    pass_at_k,
    wilson,
)

FLOAT_DIGITS = 12  # significant digits kept in metrics (see _rounded)

Specs = Mapping[str, Sequence[MetricSpec]]


def _pass_at_ks(per_prompt: list[dict[str, Any]], ks: list[int]) -> dict[str, tuple[float | None, int]]:
    """Average the per-prompt estimator over prompts with enough repeats; (value, prompts) per k.

    Prompts are grouped by (n, c) first: thousands of prompts share a few hundred pairs.
    """
    pairs = Counter((p["n"], p["successes"]) for p in per_prompt)
    out: dict[str, tuple[float | None, int]] = {}
    for k in ks:
        eligible = [(n, c, m) for (n, c), m in pairs.items() if n >= k]
        total = sum(m for _, _, m in eligible)
        value = sum(pass_at_k(n, c, k) * m for n, c, m in eligible) / total if total else None
        out[str(k)] = (value, total)
    return out


def _prompt_outcomes(per_prompt: list[dict[str, Any]]) -> dict[str, Any]:
    never = [p["prompt_id"] for p in per_prompt if p["successes"] == 0]
    always = [p["prompt_id"] for p in per_prompt if p["successes"] == p["n"]]
    return {
        "never_succeed": {"count": len(never), "ids": never},
        "always_succeed": {"count": len(always), "ids": always},
        "mixed": {"count": len(per_prompt) - len(never) - len(always)},
    }


def _reward_values(found: list[dict[str, Any]]) -> dict[str, Any]:
    distinct = found[0]["distinct_values"] if found else 0
    return {
        "distinct": distinct,
        "truncated": distinct > len(found),
        "values": [[r["value"], r["count"]] for r in found],
    }


def _counts(found: list[dict[str, Any]]) -> dict[str, int]:
    return {row["key"]: row["count"] for row in found}


def _cis(
    ov: dict[str, Any],
    passk: dict[str, tuple[float | None, int]],
    maj: dict[str, tuple[float | None, int]],
    per_prompt: list[dict[str, Any]],
) -> dict[str, Any]:
    n = ov["n_rollouts"]
    low, high = bootstrap_mean_ci(
        np.array([p["reward_sum"] for p in per_prompt]), np.array([p["n"] for p in per_prompt])
    )
    return {
        "level": CI_LEVEL,
        "accuracy": wilson(ov["accuracy"], n),
        "parse_error_rate": wilson(ov["parse_error_rate"], n),
        "error_rate": wilson(ov["error_rate"], n),
        "pass_at_k": {k: wilson(v, m) for k, (v, m) in passk.items()},
        "maj_at_k": {k: wilson(v, m) for k, (v, m) in maj.items()},
        "mean_reward": {
            "low": low,
            "high": high,
            "n": len(per_prompt),
            "method": "bootstrap-prompts",
            "resamples": BOOTSTRAP_RESAMPLES,
            "seed": BOOTSTRAP_SEED,
        },
    }


def _benchmark_metrics(ov: dict[str, Any], per_prompt: list[dict[str, Any]], extras: dict[str, Any]) -> dict[str, Any]:
    repeats = {"min": min(p["n"] for p in per_prompt), "max": max(p["n"] for p in per_prompt)}
    passk = _pass_at_ks(per_prompt, ks_for(repeats["max"]))
    maj = extras["maj"]
    values = extras["reward_values"]
    mode = max(values["values"], key=lambda v: (v[1], -v[0]), default=None)
    p50, p90, p99 = ov["latency_q"] or (None, None, None)
    return {
        "n_prompts": ov["n_prompts"],
        "n_rollouts": ov["n_rollouts"],
        "successes": ov["successes"],
        "repeats": repeats,
        "accuracy": ov["accuracy"],
        "mean_reward": ov["mean_reward"],
        "pass_at_k": {k: v for k, (v, _) in passk.items()},
        "maj_at_k": {k: v for k, (v, _) in maj.items()},
        "ci": _cis(ov, passk, maj, per_prompt),
        "reward": {
            "min": ov["reward_min"],
            "max": ov["reward_max"],
            "mean": ov["mean_reward"],
            "median": ov["reward_median"],
            "std": ov["reward_std"],
            "mode": mode[0] if mode else None,
            "mode_share": mode[1] / ov["n_rollouts"] if mode else None,
        },
        "reward_values": values,
        "distributions": extras["distributions"],
        "prompt_outcomes": _prompt_outcomes(per_prompt),
        "parse_error_rate": ov["parse_error_rate"],
        "error_count": ov["error_count"],
        "error_rate": ov["error_rate"],
        "errors": extras["errors"],
        "finish_reasons": extras["finish_reasons"],
        "tokens": {
            "prompt_mean": ov["prompt_mean"],
            "prompt_total": ov["prompt_total"],
            "completion_mean": ov["completion_mean"],
            "completion_total": ov["completion_total"],
        },
        "latency_s": {"p50": p50, "p90": p90, "p99": p99, "mean": ov["latency_mean"], "max": ov["latency_max"]},
        "tool_calls": {
            "mean": ov["tool_calls_mean"],
            "min": ov["tool_calls_min"],
            "max": ov["tool_calls_max"],
            "total": ov["tool_calls_total"],
            "reward_corr": ov["tool_calls_reward_corr"],
        },
        "reward_by_tool_calls": extras["by_tool_calls"],
        "per_prompt": [{k: v for k, v in p.items() if k != "reward_sum"} for p in per_prompt],
        "env_metrics": extras["env_metrics"],
    }


def compute_metrics(files: list[str], store: Store, specs: Specs | None = None) -> RunMetrics:
    """The run metrics of the batch parquet files (see module doc); `specs` are the metrics each
    benchmark's environment declares (envs.registry.metric_specs), keyed by benchmark name."""
    if not files:
        return RunMetrics()
    con = connect(files, store)
    try:
        duplicates = load(con, files)
        overview = {row.pop("benchmark"): row for row in queries.rows(con, queries.OVERVIEW_SQL)}
        if not overview:
            return RunMetrics(duplicate_rollouts=duplicates)
        con.execute(queries.PROMPTS_SQL)
        repeats_max = {r["benchmark"]: r["n"] for r in queries.rows(con, queries.REPEATS_MAX_SQL)}
        maj = queries.maj_at_ks(con, {b: ks_for(n) for b, n in repeats_max.items()})
        per_prompt = queries.by_benchmark(queries.rows(con, queries.PER_PROMPT_SQL))
        values = queries.by_benchmark(queries.rows(con, queries.REWARD_VALUES_SQL, {"cap": queries.MAX_REWARD_VALUES}))
        finish = queries.by_benchmark(queries.rows(con, queries.FINISH_REASONS_SQL))
        errors = queries.by_benchmark(queries.rows(con, queries.ERRORS_SQL))
        by_tools = queries.by_benchmark(queries.rows(con, queries.BY_TOOL_CALLS_SQL))
        wanted = {name: (specs or {}).get(name, ()) for name in overview}
        declared = env_metrics(con, wanted, {b: ov["error_count"] for b, ov in overview.items()})
        distributions = queries.distributions(con)
    finally:
        con.close()
    benchmarks = {}
    for name, ov in overview.items():
        extras = {
            "maj": maj.get(name, {}),
            "reward_values": _reward_values(values.get(name, [])),
            "distributions": distributions.get(name, {}),
            "errors": _counts(errors.get(name, [])),
            "finish_reasons": _counts(finish.get(name, [])),
            "by_tool_calls": by_tools.get(name, []),
            "env_metrics": declared.get(name, []),
        }
        benchmarks[name] = _benchmark_metrics(ov, per_prompt[name], extras)
    document = {
        "total_rollouts": sum(b["n_rollouts"] for b in benchmarks.values()),
        "duplicate_rollouts": duplicates,
        "benchmarks": benchmarks,
    }
    return RunMetrics.model_validate(_rounded(document))


def _rounded(value: Any) -> Any:
    """Floats to FLOAT_DIGITS significant digits, recursively: DuckDB sums in parallel, in whatever
    order the threads deliver rows, so the last bits of a mean vary from scan to scan; rounded, the
    same rollouts always give identical metrics (locally or from S3, today or on a rerun)."""
    if isinstance(value, float):
        return float(f"{value:.{FLOAT_DIGITS}g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


# Prefect task wrapper (no cache: the inputs are file lists and a store, and analysis is cheap next to
# the rollouts it summarises)


@task(name="analyze-rollouts", cache_policy=NO_CACHE)
def analyze_task(files: list[str], store: Store, specs: Specs | None = None) -> RunMetrics:
    """Compute the run metrics inside a flow."""
    metrics = compute_metrics(files, store, specs)
    get_run_logger().info(
        "analyzed %d rollouts from %d files over %d benchmarks",
        metrics.total_rollouts,
        len(files),
        len(metrics.benchmarks),
    )
    return metrics
