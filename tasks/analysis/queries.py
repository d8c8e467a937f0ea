"""The metric SQL over the deduplicated `rollouts` table, one query per block of the metrics document.

Each query function returns typed rows (a frozen dataclass per kind of row, named for what it is, whose
fields are the query's columns: a column the SQL adds or drops fails at once) or the document's own
models (core.metrics_doc); DuckDB values are made JSON-safe on the way out (`clean`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NamedTuple, TypeVar

import duckdb
import numpy as np

from core.metrics_doc import Distribution, Histogram
from tasks.analysis.stats import AtK

HISTOGRAM_BINS = 30
MAX_REWARD_VALUES = 1000
QUANTILES = {"min": 0.0, "p5": 0.05, "p25": 0.25, "p50": 0.5, "p75": 0.75, "p95": 0.95, "p99": 0.99, "max": 1.0}
DISTRIBUTION_COLUMNS = {  # name in metrics -> SQL expression (over the deduplicated rollouts)
    "reward": "eff_reward",
    "prompt_tokens": "prompt_tokens",
    "completion_tokens": "completion_tokens",
    "latency_s": "latency_s",
    # over the rollouts that reasoned (a model that does not think has no such distributions)
    "reasoning_tokens": "(CASE WHEN has_reasoning THEN reasoning_tokens END)",
    "answer_tokens": "(CASE WHEN has_reasoning THEN answer_tokens END)",
}
_INTEGER_COLUMNS = {"prompt_tokens", "completion_tokens", "reasoning_tokens", "answer_tokens"}


@dataclass(frozen=True, slots=True)
class BenchmarkRow:
    """A result row of one benchmark (the queries group by benchmark)."""

    benchmark: str


@dataclass(frozen=True, slots=True)
class Overview(BenchmarkRow):
    """A benchmark's rollouts in one row (OVERVIEW_SQL): counts, rates, reward, tokens, latency, tool calls."""

    n_rollouts: int
    n_prompts: int
    successes: int
    accuracy: float | None
    accuracy_stderr: float | None
    mean_reward: float | None
    reward_min: float | None
    reward_max: float | None
    reward_median: float | None
    reward_std: float | None
    parse_error_rate: float | None
    error_count: int
    error_rate: float | None
    prompt_mean: float | None
    prompt_total: int
    completion_mean: float | None
    completion_total: int
    latency_q: list[float | None] | None  # p50, p90, p99
    latency_mean: float | None
    latency_max: float | None
    tool_calls_mean: float | None
    tool_calls_min: int | None
    tool_calls_max: int | None
    tool_calls_total: int
    tool_calls_reward_corr: float | None
    accuracy_se: float | None  # clustered by prompt


@dataclass(frozen=True, slots=True)
class PromptStats(BenchmarkRow):
    """One prompt's rollouts (PER_PROMPT_SQL): the per-prompt table's row plus its reward sum."""

    prompt_id: str
    n: int
    successes: int
    success_rate: float | None
    mean_reward: float | None
    reward_sum: float | None
    reference: str | None
    top_answer: str | None
    prompt_hash: str | None  # the opening messages' md5 (16 hex digits): a paired comparison matches prompts by it


@dataclass(frozen=True, slots=True)
class RewardValue(BenchmarkRow):
    """A distinct reward (rounded to 6 places) and how often it occurs; `distinct_values` counts them all."""

    value: float
    count: int
    distinct_values: int


@dataclass(frozen=True, slots=True)
class ToolCallGroup(BenchmarkRow):
    """The rollouts with one tool-call count (BY_TOOL_CALLS_SQL); `se` is the mean reward's clustered SE."""

    tool_calls: int
    n: int
    prompts: int
    mean_reward: float | None
    success_rate: float | None
    se: float | None


class _Summary(NamedTuple):
    """A column's count of values `n`, mean and QUANTILES (in order) over one benchmark's rollouts."""

    n: int
    mean: float | None
    quantiles: list[float | None]


Row = TypeVar("Row", bound=BenchmarkRow)


def clean(value: Any) -> Any:
    """Make a DuckDB value JSON-safe: Decimal -> float, NaN/inf -> None."""
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def rows(con: duckdb.DuckDBPyConnection, sql: str, kind: Callable[..., Row], params: object = None) -> list[Row]:
    """The query's rows as `kind`, its columns by name (cleaned)."""
    cur = con.execute(sql, params) if params is not None else con.execute(sql)
    names = [d[0] for d in cur.description]
    return [kind(**{k: clean(v) for k, v in zip(names, row, strict=True)}) for row in cur.fetchall()]


def by_benchmark(found: list[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    for row in found:
        out.setdefault(row.benchmark, []).append(row)
    return out


def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# Needs `prompts`. accuracy_se is the cluster-robust SE of the mean over prompts i with rollouts j
# (Miller 2024, "Adding Error Bars to Evals"): sqrt(sum_i (sum_j (x_ij - mean))^2) / N, where
# sum_j (x_ij - mean) = successes_i - n_i * mean. accuracy_stderr is lm-eval's mean_stderr over rollouts.
OVERVIEW_SQL = """
WITH clustered AS (
    SELECT benchmark, sqrt(sum(power(successes - n * mean, 2))) / sum(n) AS accuracy_se
    FROM (SELECT benchmark, n, successes, sum(successes) OVER b / sum(n) OVER b AS mean
          FROM prompts WINDOW b AS (PARTITION BY benchmark))
    GROUP BY benchmark
)
SELECT * FROM (
SELECT benchmark,
       count(*) AS n_rollouts,
       count(DISTINCT prompt_id) AS n_prompts,
       sum(ok::INT) AS successes,
       avg(ok::DOUBLE) AS accuracy,
       stddev_samp(ok::DOUBLE) / sqrt(count(*)) AS accuracy_stderr,
       avg(eff_reward) AS mean_reward,
       min(eff_reward) AS reward_min,
       max(eff_reward) AS reward_max,
       median(eff_reward) AS reward_median,
       stddev_pop(eff_reward) AS reward_std,
       avg((parsed_answer IS NULL AND error IS NULL AND NOT coalesce(ended_in_reasoning, false))::DOUBLE)
           AS parse_error_rate,
       count(error) AS error_count,
       avg((error IS NOT NULL)::DOUBLE) AS error_rate,
       avg(prompt_tokens) AS prompt_mean,
       coalesce(sum(prompt_tokens), 0) AS prompt_total,
       avg(completion_tokens) AS completion_mean,
       coalesce(sum(completion_tokens), 0) AS completion_total,
       quantile_cont(latency_s, [0.5, 0.9, 0.99]) AS latency_q,
       avg(latency_s) AS latency_mean,
       max(latency_s) AS latency_max,
       avg(tool_calls) AS tool_calls_mean,
       min(tool_calls) AS tool_calls_min,
       max(tool_calls) AS tool_calls_max,
       coalesce(sum(tool_calls), 0) AS tool_calls_total,
       corr(tool_calls::DOUBLE, eff_reward) AS tool_calls_reward_corr
FROM rollouts
GROUP BY benchmark
) JOIN clustered USING (benchmark)
ORDER BY benchmark
"""

# One row per prompt (a few thousand rows: the per-prompt table, pass@k and the bootstrap use it).
PROMPTS_SQL = """
CREATE TEMP TABLE prompts AS
SELECT benchmark, prompt_id, count(*) AS n, sum(ok::INT) AS successes, avg(ok::DOUBLE) AS success_rate,
       avg(eff_reward) AS mean_reward, sum(eff_reward) AS reward_sum, min(reference) AS reference,
       min(prompt_hash) AS prompt_hash
FROM rollouts GROUP BY ALL
"""

REPEATS_MAX_SQL = "SELECT benchmark, max(n) AS n FROM prompts GROUP BY 1"

# Rewards are sums of float steps (-0.1 each in a game, say): round before counting values.
REWARD_VALUES_SQL = """
SELECT benchmark, round(eff_reward, 6) AS value, count(*) AS count,
       count(*) OVER (PARTITION BY benchmark) AS distinct_values
FROM rollouts GROUP BY benchmark, value
QUALIFY row_number() OVER (PARTITION BY benchmark ORDER BY count DESC, value) <= $cap
ORDER BY benchmark, value
"""

# Per tool-call count: mean reward with its clustered SE over the prompts that have rollouts there.
BY_TOOL_CALLS_SQL = """
SELECT benchmark, tool_calls, sum(n)::BIGINT AS n, count(*) AS prompts, any_value(mean) AS mean_reward,
       sum(oks) / sum(n) AS success_rate, sqrt(sum(power(s - n * mean, 2))) / sum(n) AS se
FROM (
    SELECT *, sum(s) OVER b / sum(n) OVER b AS mean
    FROM (SELECT benchmark, tool_calls, prompt_id, count(*) AS n, sum(eff_reward) AS s, sum(ok::INT) AS oks
          FROM rollouts GROUP BY ALL)
    WINDOW b AS (PARTITION BY benchmark, tool_calls)
)
GROUP BY benchmark, tool_calls ORDER BY benchmark, tool_calls
"""

# Per prompt, the moments of (tool calls, reward) that Pearson's r needs (stats.bootstrap_corr_ci).
_TOOL_MOMENTS_SQL = """
SELECT count(*), sum(x), sum(y), sum(x * x), sum(y * y), sum(x * y)
FROM (SELECT prompt_id, tool_calls::DOUBLE AS x, eff_reward AS y FROM rollouts
      WHERE benchmark = $bench AND tool_calls IS NOT NULL AND eff_reward IS NOT NULL)
GROUP BY prompt_id ORDER BY prompt_id
"""

FINISH_REASONS_SQL = """
SELECT benchmark, coalesce(finish_reason, 'none') AS key, count(*) AS count
FROM rollouts GROUP BY ALL ORDER BY benchmark, count DESC, key
"""

# Group errors by their first line up to the first ': ' (usually the exception type), 80 chars max.
ERRORS_SQL = """
SELECT benchmark, left(split_part(split_part(error, chr(10), 1), ': ', 1), 80) AS key, count(*) AS count
FROM rollouts WHERE error IS NOT NULL GROUP BY ALL ORDER BY benchmark, count DESC, key
"""

PER_PROMPT_SQL = """
SELECT p.benchmark, p.prompt_id, p.n, p.successes, p.success_rate, p.mean_reward, p.reward_sum,
       p.reference, w.top_answer, p.prompt_hash
FROM prompts p LEFT JOIN winners w USING (benchmark, prompt_id)
ORDER BY p.benchmark, p.prompt_id
"""


def overview(con: duckdb.DuckDBPyConnection) -> dict[str, Overview]:
    """Per benchmark (in name order), its overview; needs `prompts`."""
    return {row.benchmark: row for row in rows(con, OVERVIEW_SQL, Overview)}


def repeats_max(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Per benchmark, the most repeats any of its prompts has; needs `prompts`."""
    return dict(con.execute(REPEATS_MAX_SQL).fetchall())


def per_prompt(con: duckdb.DuckDBPyConnection) -> dict[str, list[PromptStats]]:
    """Per benchmark, its prompts in id order; needs `prompts` and `winners` (maj_at_ks)."""
    return by_benchmark(rows(con, PER_PROMPT_SQL, PromptStats))


def reward_values(con: duckdb.DuckDBPyConnection) -> dict[str, list[RewardValue]]:
    """Per benchmark, its MAX_REWARD_VALUES most common rewards, in value order."""
    return by_benchmark(rows(con, REWARD_VALUES_SQL, RewardValue, {"cap": MAX_REWARD_VALUES}))


def by_tool_calls(con: duckdb.DuckDBPyConnection) -> dict[str, list[ToolCallGroup]]:
    """Per benchmark, its rollouts grouped by tool-call count, in count order."""
    return by_benchmark(rows(con, BY_TOOL_CALLS_SQL, ToolCallGroup))


def counts(con: duckdb.DuckDBPyConnection, sql: str) -> dict[str, dict[str, int]]:
    """Per benchmark, {key: count} in the order of `sql` (FINISH_REASONS_SQL, ERRORS_SQL: most frequent first)."""
    out: dict[str, dict[str, int]] = {}
    for bench, key, count in con.execute(sql).fetchall():
        out.setdefault(bench, {})[key] = count
    return out


def tool_moments(con: duckdb.DuckDBPyConnection, bench: str) -> np.ndarray:
    """(prompts, 6) array of n, sum x, sum y, sum x^2, sum y^2, sum xy (x = tool calls, y = reward)."""
    return np.array(con.execute(_TOOL_MOMENTS_SQL, {"bench": bench}).fetchall(), dtype=np.float64).reshape(-1, 6)


def _votes_sql(ks: list[int]) -> tuple[str, str]:
    """SQL for the per-(prompt, answer) votes and the per-prompt maj@k winners, for all ks at once.

    votes: one row per distinct non-null answer of a prompt with its vote count among the first k
    repeats (one column per k), its first position, and whether it is correct. winners: per prompt,
    arg_max over answers of (votes desc, first position asc), its correctness per k and overall.
    """
    vote_cols = ", ".join(f"count(*) FILTER (WHERE r.pos <= {k}) AS v_{k}" for k in ks)
    votes = f"""
        CREATE TEMP TABLE votes AS
        SELECT r.benchmark, r.prompt_id, r.parsed_answer AS answer, min(r.pos) AS first_pos, count(*) AS votes,
               {vote_cols},
               coalesce(bool_or(r.ok) OR trim(r.parsed_answer) = trim(any_value(p.reference)), false) AS correct
        FROM rollouts r JOIN prompts p USING (benchmark, prompt_id)
        WHERE r.parsed_answer IS NOT NULL
        GROUP BY r.benchmark, r.prompt_id, r.parsed_answer
    """
    big = 1_000_000_000  # votes * big - first_pos orders by votes, then earliest answer
    win_cols = ", ".join(f"arg_max(correct, v_{k} * {big} - first_pos) FILTER (WHERE v_{k} > 0) AS m_{k}" for k in ks)
    winners = f"""
        CREATE TEMP TABLE winners AS
        SELECT benchmark, prompt_id, arg_max(answer, votes * {big} - first_pos) AS top_answer, {win_cols}
        FROM votes GROUP BY benchmark, prompt_id
    """
    return votes, winners


def maj_at_ks(con: duckdb.DuckDBPyConnection, ks_by_bench: dict[str, list[int]]) -> dict[str, dict[str, AtK]]:
    """maj@k and the number of prompts it averages over, per benchmark and k; creates `winners`."""
    ks = sorted({k for ks in ks_by_bench.values() for k in ks}) or [1]
    votes, winners = _votes_sql(ks)
    con.execute(votes)
    con.execute(winners)
    cols = ", ".join(
        f"avg(CASE WHEN p.n >= {k} THEN coalesce(w.m_{k}, false)::DOUBLE END) AS maj_{k}, "
        f"count(*) FILTER (WHERE p.n >= {k}) AS eligible_{k}"
        for k in ks
    )
    sql = f"SELECT p.benchmark, {cols} FROM prompts p LEFT JOIN winners w USING (benchmark, prompt_id) GROUP BY ALL"
    out: dict[str, dict[str, AtK]] = {}
    for bench, *values in con.execute(sql).fetchall():
        found = {k: AtK(clean(values[2 * i]), values[2 * i + 1]) for i, k in enumerate(ks)}
        out[bench] = {str(k): found[k] for k in ks_by_bench.get(bench, [])}
    return out


def _summaries(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, _Summary]]:
    """Per benchmark, each DISTRIBUTION_COLUMNS column's count, mean and quantiles (one scan)."""
    qs = "[" + ", ".join(str(q) for q in QUANTILES.values()) + "]"
    cols = ", ".join(f"count({e}), avg({e}), quantile_cont({e}, {qs})" for e in DISTRIBUTION_COLUMNS.values())
    return {
        bench: {
            name: _Summary(values[3 * i], clean(values[3 * i + 1]), clean(values[3 * i + 2]))
            for i, name in enumerate(DISTRIBUTION_COLUMNS)
        }
        for bench, *values in con.execute(f"SELECT benchmark, {cols} FROM rollouts GROUP BY ALL").fetchall()
    }


def _bins(name: str, lo: float, hi: float) -> tuple[float, int]:
    """(width, count) of the histogram bins from lo to hi: integer-wide for token counts."""
    if name in _INTEGER_COLUMNS:
        width = float(max(1, math.ceil((hi - lo + 1) / HISTOGRAM_BINS)))
        return width, max(1, math.ceil((hi - lo + 1) / width))
    count = HISTOGRAM_BINS if hi > lo else 1
    return ((hi - lo) / count if hi > lo else 1.0), count


def _histogram_counts(
    con: duckdb.DuckDBPyConnection, expr: str, bins: dict[str, tuple[float, float, int]]
) -> dict[str, list[int]]:
    """Per benchmark, the rollouts in each of its bins (lo, width, count) of the column `expr`."""
    out = {bench: [0] * count for bench, (_, _, count) in bins.items()}
    if not bins:
        return out
    # the bin layouts as a VALUES list: registering a pyarrow table costs seconds of imports the first time
    layout = ", ".join(
        f"({sql_string(bench)}, {lo!r}::DOUBLE, {width!r}::DOUBLE, {count})"
        for bench, (lo, width, count) in bins.items()
    )
    found = con.execute(
        f"""
        SELECT r.benchmark, least(floor(({expr} - b.lo) / b.width)::BIGINT, b.nbins - 1) AS bin, count(*) AS count
        FROM rollouts r JOIN (VALUES {layout}) b(benchmark, lo, width, nbins) USING (benchmark)
        WHERE ({expr}) IS NOT NULL GROUP BY ALL
        """
    ).fetchall()
    for bench, index, count in found:
        out[bench][int(index)] = int(count)
    return out


def distributions(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Distribution | None]]:
    """Quantiles and equal-width histograms of rewards, tokens and latency, per benchmark (None for a
    column with no values)."""
    summaries = _summaries(con)
    out: dict[str, dict[str, Distribution | None]] = {bench: {} for bench in summaries}
    for name, expr in DISTRIBUTION_COLUMNS.items():
        bins: dict[str, tuple[float, float, int]] = {}
        for bench, columns in summaries.items():
            if columns[name].n:
                lo, hi = columns[name].quantiles[0], columns[name].quantiles[-1]
                assert lo is not None and hi is not None  # values are finite (rewards are checked): so are quantiles
                bins[bench] = (lo, *_bins(name, lo, hi))
        histograms = _histogram_counts(con, expr, bins)
        for bench, columns in summaries.items():
            if bench not in bins:
                out[bench][name] = None
                continue
            summary, (lo, width, count) = columns[name], bins[bench]
            out[bench][name] = Distribution(
                count=summary.n,
                mean=summary.mean,
                quantiles=dict(zip(QUANTILES, summary.quantiles, strict=True)),
                histogram=Histogram(edges=[lo + i * width for i in range(count + 1)], counts=histograms[bench]),
            )
    return out
