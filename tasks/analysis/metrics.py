"""Run metrics: DuckDB SQL over a run's batch parquet files, and nothing else.

Every number in a report comes from here, computed from the rollout records (core/schema.py), so
a report can always be recomputed from the files. The heavy lifting (deduplication, per-prompt and
per-answer aggregation, histograms) happens in SQL; Python only shapes a few thousand result rows.

Conventions that matter for reading the numbers:

- An errored rollout (``error`` not null) is a failure with reward 0, whatever its row says.
- Rows repeating a (benchmark, prompt_id, repeat) (e.g. a stale batch file left beside its rerun)
  are counted once, keeping the newest ``created_at``; ``duplicate_rollouts`` says how many went.
- pass@k is the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` averaged over prompts with n >= k.
- maj@k takes the most common non-null ``parsed_answer`` among a prompt's first k repeats (ordered
  by repeat index); a tie goes to the answer that occurred first. The winner is correct when it
  equals the reference (trimmed strings), or when some rollout of the same prompt with the same
  parsed answer succeeded (the environment's own judgement, which covers equivalent forms such as
  ``1/2`` and ``0.5``). A prompt whose first k answers are all null counts as wrong.
- ``info_rates`` averages every top-level boolean key of the ``info`` JSON; errored rollouts count
  as false, completed rollouts lacking the key do not count.
- ``reward.std`` is the population standard deviation.

Confidence intervals (all 95%, in ``ci``):

- Rates use the Wilson score interval. ``accuracy``, ``parse_error_rate``, ``error_rate`` and the
  info rates are rates over rollouts (n = rollouts), which treats a prompt's repeats as independent
  and so understates the uncertainty when there are few prompts. ``pass_at_k``/``maj_at_k`` are
  rates over prompts (n = prompts with >= k repeats; each prompt contributes a value in [0, 1]
  whose variance is at most p(1-p), so the Wilson interval over prompts is conservative). With
  equal repeats, pass@1 equals accuracy, and its interval is the one that respects the clustering.
- Mean reward uses a seeded percentile bootstrap that resamples *prompts* (with all their rollouts)
  rather than rollouts, because the rollouts of one prompt are correlated: resampling them
  independently would give a too-narrow interval. Fewer than 2 prompts give no interval (null).

metrics.json (schema_version 2; tasks/reporting/report.py adds ``run_info`` and, with a baseline, ``comparison``)::

    schema_version: 2, total_rollouts: int, duplicate_rollouts: int,
    benchmarks: {<name>: {
      n_prompts, n_rollouts, successes, repeats: {min, max},
      accuracy, mean_reward, parse_error_rate, error_count, error_rate,
      pass_at_k: {"<k>": rate | null}, maj_at_k: {"<k>": rate | null},   # k = 1, 2, 4, ... and n
      ci: {level: 0.95,
           accuracy | parse_error_rate | error_rate: {low, high, n, method: "wilson"},
           pass_at_k | maj_at_k: {"<k>": {low, high, n, method: "wilson"}},
           info_rates: {<key>: {low, high, n, method: "wilson"}},
           mean_reward: {low, high, n (prompts), method: "bootstrap-prompts", resamples, seed}},
      reward: {min, max, mean, median, std, mode, mode_share},
      reward_values: {distinct, truncated, values: [[value (rounded to 6 places), count], ...]},
      distributions: {reward | prompt_tokens | completion_tokens | latency_s:
                      {count, mean, quantiles: {min, p5, p25, p50, p75, p95, p99, max},
                       histogram: {edges: [b0, ..., bN], counts: [c1, ..., cN]}} | null},
      prompt_outcomes: {never_succeed: {count, ids}, always_succeed: {count, ids}, mixed: {count}},
      errors: {<first line of the error, up to ': '>: count}, finish_reasons: {<reason | "none">: count},
      tokens: {prompt_mean, prompt_total, completion_mean, completion_total},
      latency_s: {p50, p90, p99, mean, max},
      tool_calls: {mean, min, max, total, reward_corr},
      reward_by_tool_calls: [{tool_calls, n, mean_reward, success_rate}],
      per_prompt: [{prompt_id, n, successes, success_rate, mean_reward, reference, top_answer}],
      info_rates: {<key>: rate},
      info_outcomes: {outcome|end_reason: {value: count}}  # env categorical outcomes, when present
  }}

Floats are rounded to 12 significant digits (parallel float sums differ in their last bits from
scan to scan; rounded, the same rollouts always give identical metrics). Histograms have
``HISTOGRAM_BINS`` equal-width bins from min to max (integer-wide for token
counts); ``reward_values`` keeps the ``MAX_REWARD_VALUES`` most common values when there are more.
"""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal
from typing import Any

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from core import store
from core.schema import ROLLOUT_SCHEMA

METRICS_SCHEMA_VERSION = 2
CI_LEVEL = 0.95
Z_95 = 1.959963984540054
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
HISTOGRAM_BINS = 30
FLOAT_DIGITS = 12  # significant digits kept in metrics (see _rounded)
MAX_REWARD_VALUES = 1000
QUANTILES = {"min": 0.0, "p5": 0.05, "p25": 0.25, "p50": 0.5, "p75": 0.75, "p95": 0.95, "p99": 0.99, "max": 1.0}
DISTRIBUTION_COLUMNS = {  # name in metrics -> SQL expression (over the deduplicated rollouts)
    "reward": "eff_reward",
    "prompt_tokens": "prompt_tokens",
    "completion_tokens": "completion_tokens",
    "latency_s": "latency_s",
}
_INTEGER_COLUMNS = {"prompt_tokens", "completion_tokens"}

# Columns the metrics need; the big text columns (messages, transcript, completion) stay on disk.
_METRIC_COLUMNS = (
    "benchmark",
    "prompt_id",
    "repeat",
    "reward",
    "success",
    "error",
    "parsed_answer",
    "reference",
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "tool_calls",
    "latency_s",
    "info",
    "created_at",
)


# ---------------------------------------------------------------------------------------------
# Small pure helpers


def ks_for(n: int) -> list[int]:
    """The k values reported for a benchmark whose prompts have at most n repeats."""
    if n < 1:
        return []
    ks = {n}
    k = 1
    while k <= n:
        ks.add(k)
        k *= 2
    return sorted(ks)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one prompt (n samples, c correct); the product form avoids huge binomials."""
    if k > n:
        raise ValueError(f"pass@{k} is undefined for n={n} samples")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def wilson_interval(rate: float | None, n: int, z: float = Z_95) -> tuple[float | None, float | None]:
    """Wilson score interval for a rate observed over n trials (None when n is 0 or the rate unknown)."""
    if rate is None or n <= 0:
        return None, None
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (rate + z2 / (2 * n)) / denom
    half = z * math.sqrt(max(rate * (1.0 - rate), 0.0) / n + z2 / (4 * n * n)) / denom
    low = 0.0 if rate <= 0.0 else max(0.0, center - half)
    high = 1.0 if rate >= 1.0 else min(1.0, center + half)
    return low, high


def wilson(rate: float | None, n: int) -> dict[str, Any]:
    low, high = wilson_interval(rate, n)
    return {"low": low, "high": high, "n": n, "method": "wilson"}


def bootstrap_mean_ci(
    sums: np.ndarray,
    counts: np.ndarray,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = CI_LEVEL,
) -> tuple[float | None, float | None]:
    """Percentile bootstrap of sum(sums)/sum(counts), resampling clusters (prompts) with replacement."""
    n = len(sums)
    if n < 2:
        return None, None
    rng = np.random.default_rng(seed)
    sums, counts = np.asarray(sums, dtype=np.float64), np.asarray(counts, dtype=np.float64)
    stats = np.empty(resamples)
    chunk = max(1, 2_000_000 // n)  # bounded memory: chunk x n indices at a time
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        stats[start:stop] = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    tail = (1.0 - level) / 2
    low, high = np.quantile(stats, [tail, 1.0 - tail])
    return float(low), float(high)


def _clean(value: Any) -> Any:
    """Make a DuckDB value JSON-safe: Decimal -> float, NaN/inf -> None."""
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: Any = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, params) if params is not None else con.execute(sql)
    names = [d[0] for d in cur.description]
    return [{k: _clean(v) for k, v in zip(names, row, strict=True)} for row in cur.fetchall()]


def _by_benchmark(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row.pop("benchmark"), []).append(row)
    return out


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# ---------------------------------------------------------------------------------------------
# Connecting DuckDB to the store


def _duckdb_path(url: str) -> str:
    """DuckDB reads local paths itself; file:// is stripped, other schemes go through fsspec."""
    return url[len("file://") :] if url.startswith("file://") else url


def connect(files: list[str], storage_options: dict[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that can read `files`, with fsspec filesystems registered."""
    con = duckdb.connect(":memory:")
    registered: set[str] = set()
    for url in files:
        if store.is_local(url):
            continue
        scheme = url.split("://", 1)[0]
        if scheme in registered:
            continue
        fs, _ = store.filesystem(url, storage_options)
        con.register_filesystem(fs)
        protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
        registered.update(protocols)
        registered.add(scheme)
    return con


def _read_error(files: list[str], exc: Exception) -> store.StoreError:
    shown = ", ".join(files[:3]) + (f" (+{len(files) - 3} more)" if len(files) > 3 else "")
    return store.StoreError(f"cannot read rollout files {shown}: {type(exc).__name__}: {exc}")


def _load(con: duckdb.DuckDBPyConnection, files: list[str]) -> int:
    """Materialise the deduplicated `rollouts` table in one scan + one window; returns duplicates dropped.

    The window orders each prompt's rows by (repeat, newest first): a row whose predecessor has the
    same repeat is a stale duplicate, and dense_rank() is the 1-based position among the kept repeats.
    """
    cols = ", ".join(f'"{c}"' for c in _METRIC_COLUMNS if c != "created_at")
    try:
        con.execute(
            f"""
            CREATE TEMP TABLE rollouts AS
            SELECT * EXCLUDE (prev_repeat),
                   CASE WHEN error IS NULL THEN reward ELSE 0.0 END AS eff_reward,
                   coalesce(success AND error IS NULL, false) AS ok
            FROM (
                SELECT {cols}, dense_rank() OVER w AS pos, lag(repeat) OVER w AS prev_repeat
                FROM read_parquet($files, union_by_name = true)
                WINDOW w AS (PARTITION BY benchmark, prompt_id ORDER BY repeat, created_at DESC)
            )
            WHERE prev_repeat IS DISTINCT FROM repeat
            """,
            {"files": [_duckdb_path(f) for f in files]},
        )
        (kept,) = con.execute("SELECT count(*) FROM rollouts").fetchone()
        (raw,) = con.execute(
            "SELECT count(*) FROM read_parquet($files, union_by_name = true)",
            {"files": [_duckdb_path(f) for f in files]},
        ).fetchone()  # parquet metadata only
    except (duckdb.Error, OSError) as exc:
        raise _read_error(files, exc) from exc
    return raw - kept


# ---------------------------------------------------------------------------------------------
# The SQL, one query per block of the metrics


_OVERVIEW_SQL = """
SELECT benchmark,
       count(*) AS n_rollouts,
       count(DISTINCT prompt_id) AS n_prompts,
       sum(ok::INT) AS successes,
       avg(ok::DOUBLE) AS accuracy,
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
ORDER BY benchmark
"""

# One row per prompt (a few thousand rows: the per-prompt table, pass@k and the bootstrap use it).
_PROMPTS_SQL = """
CREATE TEMP TABLE prompts AS
SELECT benchmark, prompt_id, count(*) AS n, sum(ok::INT) AS successes, avg(ok::DOUBLE) AS success_rate,
       avg(eff_reward) AS mean_reward, sum(eff_reward) AS reward_sum, min(reference) AS reference
FROM rollouts GROUP BY ALL
"""

# Rewards are sums of float steps (-0.1 each in Tetris): round before counting values.
_REWARD_VALUES_SQL = """
SELECT benchmark, round(eff_reward, 6) AS value, count(*) AS count,
       count(*) OVER (PARTITION BY benchmark) AS distinct_values
FROM rollouts GROUP BY benchmark, value
QUALIFY row_number() OVER (PARTITION BY benchmark ORDER BY count DESC, value) <= $cap
ORDER BY benchmark, value
"""

_BY_TOOL_CALLS_SQL = """
SELECT benchmark, tool_calls, count(*) AS n, avg(eff_reward) AS mean_reward,
       avg(ok::DOUBLE) AS success_rate
FROM rollouts GROUP BY ALL ORDER BY ALL
"""

_FINISH_REASONS_SQL = """
SELECT benchmark, coalesce(finish_reason, 'none') AS key, count(*) AS count
FROM rollouts GROUP BY ALL ORDER BY benchmark, count DESC, key
"""

# Categorical outcomes some environments report in `info`: the code sandbox's `outcome` (pass, fail,
# timeout, crash, memory, error) and Tetris's `end_reason` (success, lockout, tool_limit, ...).
OUTCOME_KEYS = ("outcome", "end_reason")
_INFO_OUTCOMES_SQL = """
SELECT benchmark, k AS info_key, v AS key, count(*) AS count
FROM (
    SELECT benchmark, unnest(?::VARCHAR[]) AS k, json_extract_string(info, '$.' || unnest(?::VARCHAR[])) AS v
    FROM rollouts WHERE json_valid(info)
)
WHERE v IS NOT NULL GROUP BY ALL ORDER BY benchmark, info_key, count DESC, key
"""

# Group errors by their first line up to the first ': ' (usually the exception type), 80 chars max.
_ERRORS_SQL = """
SELECT benchmark, left(split_part(split_part(error, chr(10), 1), ': ', 1), 80) AS key, count(*) AS count
FROM rollouts WHERE error IS NOT NULL GROUP BY ALL ORDER BY benchmark, count DESC, key
"""

# Which top-level keys exist per benchmark (one JSON parse per row); their values come next. Rows
# whose info is not valid JSON show up as the key _INVALID_INFO (so the next pass can skip them).
_INVALID_INFO = "\x00invalid"
_INFO_KEYS_SQL = f"""
SELECT benchmark, key
FROM (SELECT benchmark, unnest(coalesce(try(json_keys(info)), ['{_INVALID_INFO}'])) AS key
      FROM rollouts WHERE error IS NULL)
GROUP BY ALL ORDER BY ALL
"""


def _json_path(key: str) -> str:
    """A JSON pointer for a top-level key (any characters, '~' and '/' escaped)."""
    return "/" + key.replace("~", "~0").replace("/", "~1")


def _info_rates(con: duckdb.DuckDBPyConnection, errors: dict[str, int]) -> dict[str, dict[str, tuple[int, int]]]:
    """Per benchmark: key -> (trues, rollouts counted) for every key that is boolean somewhere.

    All keys of a benchmark are extracted with one multi-path json_extract (one parse per row); a
    value counts when its JSON text is exactly true/false (a string "true" is '"true"'). Errored
    rollouts count as false (they are added to the denominator).
    """
    keys: dict[str, list[str]] = {}
    for row in _rows(con, _INFO_KEYS_SQL):
        keys.setdefault(row["benchmark"], []).append(row["key"])
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for bench, names in keys.items():
        guard = " AND json_valid(info)" if _INVALID_INFO in names else ""
        names = [k for k in names if k != _INVALID_INFO]
        if not names:
            continue
        paths = "[" + ", ".join(_sql_string(_json_path(k)) for k in names) + "]"
        aggs = ", ".join(
            f"sum((v[{i}] = 'true')::INT) AS t{i}, sum((v[{i}] IN ('true', 'false'))::INT) AS b{i}"
            for i in range(1, len(names) + 1)
        )
        sql = f"""
            SELECT {aggs} FROM (
                SELECT json_extract(info, {paths})::VARCHAR[] AS v FROM rollouts
                WHERE benchmark = $bench AND error IS NULL{guard})
        """
        (row,) = con.execute(sql, {"bench": bench}).fetchall()
        rates = {}
        for i, key in enumerate(names):
            trues, booleans = row[2 * i] or 0, row[2 * i + 1] or 0
            if booleans:
                rates[key] = (int(trues), int(booleans) + errors.get(bench, 0))
        out[bench] = rates
    return out


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


def _maj_at_ks(con: duckdb.DuckDBPyConnection, ks_by_bench: dict[str, list[int]]) -> dict[str, dict[str, Any]]:
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
    for row in _rows(con, sql):
        bench = row["benchmark"]
        out[bench] = {str(k): (row[f"maj_{k}"], row[f"eligible_{k}"]) for k in ks_by_bench.get(bench, [])}
    return out


_PER_PROMPT_SQL = """
SELECT p.benchmark, p.prompt_id, p.n, p.successes, p.success_rate, p.mean_reward, p.reward_sum,
       p.reference, w.top_answer
FROM prompts p LEFT JOIN winners w USING (benchmark, prompt_id)
ORDER BY p.benchmark, p.prompt_id
"""


def _distributions(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Any]]:
    """Quantiles and equal-width histograms of rewards, tokens and latency, per benchmark."""
    qs = "[" + ", ".join(str(q) for q in QUANTILES.values()) + "]"
    stats_cols = ", ".join(
        f"count({expr}) AS {name}_n, avg({expr}) AS {name}_mean, quantile_cont({expr}, {qs}) AS {name}_q"
        for name, expr in DISTRIBUTION_COLUMNS.items()
    )
    stats = {
        row.pop("benchmark"): row for row in _rows(con, f"SELECT benchmark, {stats_cols} FROM rollouts GROUP BY ALL")
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
        table = pa.table(
            {
                "benchmark": list(bins),
                "lo": [b[0] for b in bins.values()],
                "width": [b[1] for b in bins.values()],
                "nbins": [b[2] for b in bins.values()],
            }
        )
        con.register("bins", table)
        try:
            rows = con.execute(
                f"""
                SELECT r.benchmark, least(floor((r.{expr} - b.lo) / b.width)::BIGINT, b.nbins - 1) AS bin,
                       count(*) AS count
                FROM rollouts r JOIN bins b USING (benchmark)
                WHERE r.{expr} IS NOT NULL GROUP BY ALL
                """
            ).fetchall()
        finally:
            con.unregister("bins")
        for bench, index, count in rows:
            out[bench][name]["histogram"]["counts"][int(index)] = int(count)
    return out


# ---------------------------------------------------------------------------------------------
# Shaping query results into the metrics dict


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


def _reward_values(rows: list[dict[str, Any]]) -> dict[str, Any]:
    distinct = rows[0]["distinct_values"] if rows else 0
    return {
        "distinct": distinct,
        "truncated": distinct > len(rows),
        "values": [[r["value"], r["count"]] for r in rows],
    }


def _counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {row["key"]: row["count"] for row in rows}


def _cis(
    ov: dict[str, Any],
    passk: dict[str, tuple[float | None, int]],
    maj: dict[str, tuple[float | None, int]],
    info: dict[str, tuple[int, int]],
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
        "info_rates": {key: wilson(t / b, b) for key, (t, b) in info.items()},
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
    ks = ks_for(repeats["max"])
    passk = _pass_at_ks(per_prompt, ks)
    maj = extras["maj"]
    values = extras["reward_values"]
    mode = max(values["values"], key=lambda v: (v[1], -v[0]), default=None)
    p50, p90, p99 = ov["latency_q"] or (None, None, None)
    metrics = {
        "n_prompts": ov["n_prompts"],
        "n_rollouts": ov["n_rollouts"],
        "successes": ov["successes"],
        "repeats": repeats,
        "accuracy": ov["accuracy"],
        "mean_reward": ov["mean_reward"],
        "pass_at_k": {k: v for k, (v, _) in passk.items()},
        "maj_at_k": {k: v for k, (v, _) in maj.items()},
        "ci": _cis(ov, passk, maj, extras["info"], per_prompt),
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
        "info_outcomes": extras["info_outcomes"],
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
        "info_rates": {key: t / b for key, (t, b) in extras["info"].items()},
    }
    return metrics


def _outcome_counts(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """{info key: {value: count}} from the outcome query's rows (most frequent first)."""
    grouped: dict[str, dict[str, int]] = {}
    for row in rows:
        grouped.setdefault(row["info_key"], {})[row["key"]] = row["count"]
    return grouped


def empty_metrics() -> dict[str, Any]:
    return {
        "schema_version": METRICS_SCHEMA_VERSION,
        "total_rollouts": 0,
        "duplicate_rollouts": 0,
        "benchmarks": {},
    }


def compute_metrics(files: list[str], storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compute the JSON-serialisable run metrics from the batch parquet files (see module doc)."""
    if not files:
        return empty_metrics()
    con = connect(files, storage_options)
    try:
        duplicates = _load(con, files)
        overview = {row.pop("benchmark"): row for row in _rows(con, _OVERVIEW_SQL)}
        if not overview:
            return {**empty_metrics(), "duplicate_rollouts": duplicates}
        con.execute(_PROMPTS_SQL)
        repeats_max = {
            r["benchmark"]: r["n"] for r in _rows(con, "SELECT benchmark, max(n) AS n FROM prompts GROUP BY 1")
        }
        maj = _maj_at_ks(con, {b: ks_for(n) for b, n in repeats_max.items()})
        per_prompt = _by_benchmark(_rows(con, _PER_PROMPT_SQL))
        values = _by_benchmark(_rows(con, _REWARD_VALUES_SQL, {"cap": MAX_REWARD_VALUES}))
        finish = _by_benchmark(_rows(con, _FINISH_REASONS_SQL))
        errors = _by_benchmark(_rows(con, _ERRORS_SQL))
        outcomes = _by_benchmark(_rows(con, _INFO_OUTCOMES_SQL, [list(OUTCOME_KEYS), list(OUTCOME_KEYS)]))
        by_tools = _by_benchmark(_rows(con, _BY_TOOL_CALLS_SQL))
        info = _info_rates(con, {b: ov["error_count"] for b, ov in overview.items()})
        distributions = _distributions(con)
    finally:
        con.close()
    benchmarks = {}
    for name, ov in overview.items():
        extras = {
            "maj": maj.get(name, {}),
            "reward_values": _reward_values(values.get(name, [])),
            "distributions": distributions.get(name, {}),
            "errors": _counts(errors.get(name, [])),
            "info_outcomes": _outcome_counts(outcomes.get(name, [])),
            "finish_reasons": _counts(finish.get(name, [])),
            "by_tool_calls": by_tools.get(name, []),
            "info": info.get(name, {}),
        }
        benchmarks[name] = _benchmark_metrics(ov, per_prompt[name], extras)
    return _rounded(
        {
            "schema_version": METRICS_SCHEMA_VERSION,
            "total_rollouts": sum(b["n_rollouts"] for b in benchmarks.values()),
            "duplicate_rollouts": duplicates,
            "benchmarks": benchmarks,
        }
    )


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


# ---------------------------------------------------------------------------------------------
# Rows for report tables


def load_rollouts_frame(
    files: list[str],
    storage_options: dict[str, Any] | None = None,
    columns: list[str] | None = None,
    per_benchmark_limit: int | None = None,
    dedupe: bool = True,
) -> pl.DataFrame:
    """Per-rollout rows (selected columns) ordered by benchmark, prompt and repeat, deduplicated like
    the metrics; with `per_benchmark_limit`, only the first rows of each benchmark.

    The rows to keep are chosen on the small key columns first (a top-N per benchmark), and only
    they are read in full, so a capped read of a large run does not materialise its transcripts.
    `dedupe=False` skips the duplicate check (for callers that know there are none: it costs a
    window over every row).
    """
    names = list(columns) if columns is not None else ROLLOUT_SCHEMA.names
    unknown = sorted(set(names) - set(ROLLOUT_SCHEMA.names))
    if unknown:
        raise ValueError(f"unknown rollout columns: {unknown}")
    if not files:
        return pl.from_arrow(ROLLOUT_SCHEMA.empty_table().select(names))
    params = {"files": [_duckdb_path(f) for f in files]}
    source = "read_parquet($files, union_by_name = true, filename = true)"
    keys = "benchmark, prompt_id, repeat, created_at, filename"
    newest = f"SELECT {keys} FROM {source}"
    if dedupe:
        newest += (
            " QUALIFY row_number() OVER ("
            "PARTITION BY benchmark, prompt_id, repeat ORDER BY created_at DESC, filename DESC) = 1"
        )
    select = ", ".join(f'r."{c}"' for c in names)
    con = connect(files, storage_options)
    try:
        if per_benchmark_limit is None:
            picked = "SELECT * FROM newest"
        else:
            benches = [b for (b,) in con.execute(f"SELECT DISTINCT benchmark FROM {source}", params).fetchall()]
            n = int(per_benchmark_limit)
            picked = (
                " UNION ALL ".join(
                    f"(SELECT * FROM newest WHERE benchmark = {_sql_string(b)} ORDER BY prompt_id, repeat LIMIT {n})"
                    for b in benches
                )
                or "SELECT * FROM newest WHERE false"
            )
        sql = f"""
            WITH newest AS ({newest}), picked AS ({picked})
            SELECT {select} FROM {source} r JOIN picked USING ({keys})
            ORDER BY r.benchmark, r.prompt_id, r.repeat
        """
        return con.sql(sql, params=params).pl()
    except (duckdb.Error, OSError) as exc:
        raise _read_error(files, exc) from exc
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# Prefect task wrappers (no cache: the inputs are file lists and credentials, and analysis is cheap
# next to the rollouts it summarises)


@task(name="analyze-rollouts", cache_policy=NO_CACHE)
def analyze_task(files: list[str], storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compute the run metrics inside a flow."""
    metrics = compute_metrics(files, storage_options)
    get_run_logger().info(
        "analyzed %d rollouts from %d files over %d benchmarks",
        metrics["total_rollouts"],
        len(files),
        len(metrics["benchmarks"]),
    )
    return metrics
