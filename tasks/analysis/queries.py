"""The metric SQL over the deduplicated `rollouts` table, one query per block of the metrics document.

Also the small helpers that turn DuckDB results into JSON-safe rows.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import duckdb
import numpy as np

HISTOGRAM_BINS = 30
MAX_REWARD_VALUES = 1000
QUANTILES = {"min": 0.0, "p5": 0.05, "p25": 0.25, "p50": 0.5, "p75": 0.75, "p95": 0.95, "p99": 0.99, "max": 1.0}
DISTRIBUTION_COLUMNS = {  # name in metrics -> SQL expression (over the deduplicated rollouts)
    "reward": "eff_reward",
    "prompt_tokens": "prompt_tokens",
    "completion_tokens": "completion_tokens",
    "latency_s": "latency_s",
}
_INTEGER_COLUMNS = {"prompt_tokens", "completion_tokens"}


def clean(value: Any) -> Any:
    """Make a DuckDB value JSON-safe: Decimal -> float, NaN/inf -> None."""
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: Any = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, params) if params is not None else con.execute(sql)
    names = [d[0] for d in cur.description]
    return [{k: clean(v) for k, v in zip(names, row, strict=True)} for row in cur.fetchall()]


def by_benchmark(found: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in found:
        out.setdefault(row.pop("benchmark"), []).append(row)
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
       avg((parsed_answer IS NULL AND error IS NULL)::DOUBLE) AS parse_error_rate,
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
       avg(eff_reward) AS mean_reward, sum(eff_reward) AS reward_sum, min(reference) AS reference
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
       p.reference, w.top_answer
FROM prompts p LEFT JOIN winners w USING (benchmark, prompt_id)
ORDER BY p.benchmark, p.prompt_id
"""


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


def maj_at_ks(con: duckdb.DuckDBPyConnection, ks_by_bench: dict[str, list[int]]) -> dict[str, dict[str, Any]]:
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
    out: dict[str, dict[str, Any]] = {}
    for row in rows(con, sql):
        bench = row["benchmark"]
        out[bench] = {str(k): (row[f"maj_{k}"], row[f"eligible_{k}"]) for k in ks_by_bench.get(bench, [])}
    return out


def distributions(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Any]]:
    """Quantiles and equal-width histograms of rewards, tokens and latency, per benchmark."""
    qs = "[" + ", ".join(str(q) for q in QUANTILES.values()) + "]"
    stats_cols = ", ".join(
        f"count({expr}) AS {name}_n, avg({expr}) AS {name}_mean, quantile_cont({expr}, {qs}) AS {name}_q"
        for name, expr in DISTRIBUTION_COLUMNS.items()
    )
    stats = {
        row.pop("benchmark"): row for row in rows(con, f"SELECT benchmark, {stats_cols} FROM rollouts GROUP BY ALL")
    }
    out: dict[str, dict[str, Any]] = {bench: {} for bench in stats}
    for name, expr in DISTRIBUTION_COLUMNS.items():
        bins: dict[str, tuple[float, float, int]] = {}
        for bench, row in stats.items():
            if not row[f"{name}_n"]:
                out[bench][name] = None
                continue
            lo, hi = row[f"{name}_q"][0], row[f"{name}_q"][-1]
            if name in _INTEGER_COLUMNS:
                width = float(max(1, math.ceil((hi - lo + 1) / HISTOGRAM_BINS)))
                count = max(1, math.ceil((hi - lo + 1) / width))
            else:
                count = HISTOGRAM_BINS if hi > lo else 1
                width = (hi - lo) / count if hi > lo else 1.0
            bins[bench] = (lo, width, count)
            out[bench][name] = {
                "count": row[f"{name}_n"],
                "mean": row[f"{name}_mean"],
                "quantiles": dict(zip(QUANTILES, row[f"{name}_q"], strict=True)),
                "histogram": {"edges": [lo + i * width for i in range(count + 1)], "counts": [0] * count},
            }
        if not bins:
            continue
        # the bin layouts as a VALUES list: registering a pyarrow table costs seconds of imports the first time
        layout = ", ".join(
            f"({sql_string(bench)}, {lo!r}::DOUBLE, {width!r}::DOUBLE, {count})"
            for bench, (lo, width, count) in bins.items()
        )
        found = con.execute(
            f"""
            SELECT r.benchmark, least(floor((r.{expr} - b.lo) / b.width)::BIGINT, b.nbins - 1) AS bin, count(*) AS count
            FROM rollouts r JOIN (VALUES {layout}) b(benchmark, lo, width, nbins) USING (benchmark)
            WHERE r.{expr} IS NOT NULL GROUP BY ALL
            """
        ).fetchall()
        for bench, index, count in found:
            out[bench][name]["histogram"]["counts"][int(index)] = int(count)
    return out
