"""Run metrics: DuckDB SQL over a run's batch parquet files, and nothing else.

Every number in a report comes from here, computed from the rollout records (tasks/records.py), so
a report can always be recomputed from the files. Conventions that matter for reading the numbers:

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
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from tasks import store
from tasks.records import ROLLOUT_SCHEMA

METRICS_SCHEMA_VERSION = 1

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


def _load(con: duckdb.DuckDBPyConnection, files: list[str]) -> int:
    """Materialise the deduplicated `rollouts` table (one parquet scan); returns duplicates dropped."""
    cols = ", ".join(f'"{c}"' for c in _METRIC_COLUMNS)
    con.execute(
        f"CREATE TEMP TABLE raw AS SELECT {cols} FROM read_parquet($files, union_by_name = true)",
        {"files": [_duckdb_path(f) for f in files]},
    )
    con.execute(
        """
        CREATE TEMP TABLE rollouts AS
        SELECT *,
               CASE WHEN error IS NULL THEN reward ELSE 0.0 END AS eff_reward,
               coalesce(success AND error IS NULL, false) AS ok
        FROM raw
        QUALIFY row_number() OVER (
            PARTITION BY benchmark, prompt_id, repeat ORDER BY created_at DESC) = 1
        """
    )
    # pos: 1-based position of a rollout among its prompt's repeats; n: the prompt's repeat count.
    con.execute(
        """
        CREATE TEMP VIEW ranked AS
        SELECT *,
               row_number() OVER (PARTITION BY benchmark, prompt_id ORDER BY repeat) AS pos,
               count(*) OVER (PARTITION BY benchmark, prompt_id) AS n
        FROM rollouts
        """
    )
    (raw_n,) = con.execute("SELECT count(*) FROM raw").fetchone()
    (kept_n,) = con.execute("SELECT count(*) FROM rollouts").fetchone()
    con.execute("DROP TABLE raw")
    return raw_n - kept_n


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

_REPEATS_SQL = """
SELECT benchmark, min(n) AS min, max(n) AS max
FROM (SELECT benchmark, prompt_id, count(*) AS n FROM rollouts GROUP BY ALL)
GROUP BY benchmark
"""

# Rewards are sums of float steps (-0.1 each in Tetris): round before counting the mode.
_REWARD_MODE_SQL = """
SELECT benchmark, value AS mode, votes / total AS mode_share
FROM (
    SELECT benchmark, round(eff_reward, 6) AS value, count(*)::DOUBLE AS votes,
           sum(count(*)) OVER (PARTITION BY benchmark) AS total
    FROM rollouts GROUP BY benchmark, value
)
QUALIFY row_number() OVER (PARTITION BY benchmark ORDER BY votes DESC, value) = 1
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

# Group errors by their first line up to the first ': ' (usually the exception type), 80 chars max.
_ERRORS_SQL = """
SELECT benchmark, left(split_part(split_part(error, chr(10), 1), ': ', 1), 80) AS key, count(*) AS count
FROM rollouts WHERE error IS NOT NULL GROUP BY ALL ORDER BY benchmark, count DESC, key
"""

_INFO_RATES_SQL = """
WITH keys AS (
    SELECT benchmark, info, key, '/' || replace(replace(key, '~', '~0'), '/', '~1') AS ptr
    FROM rollouts, unnest(json_keys(info)) AS u(key)
    WHERE error IS NULL AND json_valid(info) AND json_type(info) = 'OBJECT'
), bools AS (
    SELECT benchmark, key, json_extract_string(info, ptr) = 'true' AS value
    FROM keys WHERE json_type(info, ptr) = 'BOOLEAN'
), errs AS (
    SELECT benchmark, count(error) AS errors FROM rollouts GROUP BY benchmark
)
SELECT bools.benchmark, key, sum(value::INT) / (count(*) + any_value(errs.errors)) AS rate
FROM bools JOIN errs USING (benchmark)
GROUP BY ALL ORDER BY ALL
"""

# Majority answer over all of a prompt's repeats (same tie rule as maj@k).
_PER_PROMPT_SQL = """
WITH votes AS (
    SELECT benchmark, prompt_id, parsed_answer AS answer, count(*) AS votes, min(pos) AS first_pos
    FROM ranked WHERE parsed_answer IS NOT NULL GROUP BY ALL
), top AS (
    SELECT benchmark, prompt_id, answer FROM votes
    QUALIFY row_number() OVER (PARTITION BY benchmark, prompt_id ORDER BY votes DESC, first_pos) = 1
)
SELECT r.benchmark, r.prompt_id, count(*) AS n, sum(r.ok::INT) AS successes,
       avg(r.ok::DOUBLE) AS success_rate, avg(r.eff_reward) AS mean_reward,
       min(r.reference) AS reference, any_value(top.answer) AS top_answer
FROM rollouts r LEFT JOIN top USING (benchmark, prompt_id)
GROUP BY r.benchmark, r.prompt_id
ORDER BY r.benchmark, r.prompt_id
"""

_MAJ_AT_K_SQL = """
WITH eligible AS (
    SELECT r.benchmark, ks.k, r.prompt_id, r.pos, r.parsed_answer, r.reference
    FROM ranked r JOIN ks ON r.benchmark = ks.benchmark AND r.n >= ks.k AND r.pos <= ks.k
), votes AS (
    SELECT benchmark, k, prompt_id, parsed_answer AS answer, count(*) AS votes, min(pos) AS first_pos
    FROM eligible WHERE parsed_answer IS NOT NULL GROUP BY ALL
), winners AS (
    SELECT * FROM votes
    QUALIFY row_number() OVER (PARTITION BY benchmark, k, prompt_id ORDER BY votes DESC, first_pos) = 1
), prompts AS (
    SELECT benchmark, k, prompt_id, min(reference) AS reference FROM eligible GROUP BY ALL
), judged_correct AS (
    SELECT DISTINCT benchmark, prompt_id, parsed_answer AS answer
    FROM rollouts WHERE ok AND parsed_answer IS NOT NULL
)
SELECT p.benchmark, p.k,
       avg(CASE WHEN w.answer IS NULL THEN 0.0
                WHEN trim(w.answer) = trim(p.reference) OR j.answer IS NOT NULL THEN 1.0
                ELSE 0.0 END) AS maj
FROM prompts p
LEFT JOIN winners w USING (benchmark, k, prompt_id)
LEFT JOIN judged_correct j
       ON j.benchmark = p.benchmark AND j.prompt_id = p.prompt_id AND j.answer = w.answer
GROUP BY p.benchmark, p.k
ORDER BY p.benchmark, p.k
"""


# ---------------------------------------------------------------------------------------------
# Shaping query results into the metrics dict


def _pass_at_ks(per_prompt: list[dict[str, Any]], ks: list[int]) -> dict[str, float | None]:
    """Average the per-prompt estimator over prompts with enough repeats for each k."""
    out: dict[str, float | None] = {}
    for k in ks:
        values = [pass_at_k(p["n"], p["successes"], k) for p in per_prompt if p["n"] >= k]
        out[str(k)] = sum(values) / len(values) if values else None
    return out


def _maj_at_ks(con: duckdb.DuckDBPyConnection, ks_by_bench: dict[str, list[int]]) -> dict[str, dict]:
    pairs = [(b, k) for b, ks in ks_by_bench.items() for k in ks]
    ks_table = pa.table(
        {"benchmark": [b for b, _ in pairs], "k": [k for _, k in pairs]},
        schema=pa.schema([("benchmark", pa.string()), ("k", pa.int64())]),
    )
    con.register("ks", ks_table)
    try:
        rows = _rows(con, _MAJ_AT_K_SQL)
    finally:
        con.unregister("ks")
    out: dict[str, dict[str, float | None]] = {b: {str(k): None for k in ks} for b, ks in ks_by_bench.items()}
    for row in rows:
        out[row["benchmark"]][str(row["k"])] = row["maj"]
    return out


def _counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {row["key"]: row["count"] for row in rows}


def _benchmark_metrics(
    ov: dict[str, Any],
    repeats: dict[str, Any],
    mode: dict[str, Any],
    per_prompt: list[dict[str, Any]],
    maj: dict[str, float | None],
    extras: dict[str, Any],
) -> dict[str, Any]:
    ks = ks_for(repeats["max"])
    p50, p90, p99 = ov["latency_q"] or (None, None, None)
    return {
        "n_prompts": ov["n_prompts"],
        "n_rollouts": ov["n_rollouts"],
        "successes": ov["successes"],
        "repeats": {"min": repeats["min"], "max": repeats["max"]},
        "accuracy": ov["accuracy"],
        "mean_reward": ov["mean_reward"],
        "pass_at_k": _pass_at_ks(per_prompt, ks),
        "maj_at_k": maj,
        "reward": {
            "min": ov["reward_min"],
            "max": ov["reward_max"],
            "mean": ov["mean_reward"],
            "median": ov["reward_median"],
            "std": ov["reward_std"],
            "mode": mode.get("mode"),
            "mode_share": mode.get("mode_share"),
        },
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
        "latency_s": {
            "p50": p50,
            "p90": p90,
            "p99": p99,
            "mean": ov["latency_mean"],
            "max": ov["latency_max"],
        },
        "tool_calls": {
            "mean": ov["tool_calls_mean"],
            "min": ov["tool_calls_min"],
            "max": ov["tool_calls_max"],
            "total": ov["tool_calls_total"],
            "reward_corr": ov["tool_calls_reward_corr"],
        },
        "reward_by_tool_calls": extras["by_tool_calls"],
        "per_prompt": per_prompt,
        "info_rates": extras["info_rates"],
    }


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
        repeats = {row.pop("benchmark"): row for row in _rows(con, _REPEATS_SQL)}
        modes = {row.pop("benchmark"): row for row in _rows(con, _REWARD_MODE_SQL)}
        per_prompt = _by_benchmark(_rows(con, _PER_PROMPT_SQL))
        maj = _maj_at_ks(con, {b: ks_for(r["max"]) for b, r in repeats.items()})
        finish = _by_benchmark(_rows(con, _FINISH_REASONS_SQL))
        errors = _by_benchmark(_rows(con, _ERRORS_SQL))
        by_tools = _by_benchmark(_rows(con, _BY_TOOL_CALLS_SQL))
        info = _by_benchmark(_rows(con, _INFO_RATES_SQL))
    finally:
        con.close()
    benchmarks = {}
    for name, ov in overview.items():
        extras = {
            "errors": _counts(errors.get(name, [])),
            "finish_reasons": _counts(finish.get(name, [])),
            "by_tool_calls": by_tools.get(name, []),
            "info_rates": {row["key"]: row["rate"] for row in info.get(name, [])},
        }
        benchmarks[name] = _benchmark_metrics(
            ov, repeats[name], modes.get(name, {}), per_prompt.get(name, []), maj[name], extras
        )
    return {
        "schema_version": METRICS_SCHEMA_VERSION,
        "total_rollouts": sum(b["n_rollouts"] for b in benchmarks.values()),
        "duplicate_rollouts": duplicates,
        "benchmarks": benchmarks,
    }


def load_rollouts_frame(
    files: list[str],
    storage_options: dict[str, Any] | None = None,
    columns: list[str] | None = None,
) -> pl.DataFrame:
    """Per-rollout rows (selected columns) ordered by benchmark, prompt and repeat, for report tables."""
    names = list(columns) if columns is not None else ROLLOUT_SCHEMA.names
    unknown = sorted(set(names) - set(ROLLOUT_SCHEMA.names))
    if unknown:
        raise ValueError(f"unknown rollout columns: {unknown}")
    if not files:
        return pl.from_arrow(ROLLOUT_SCHEMA.empty_table().select(names))
    order = [c for c in ("benchmark", "prompt_id", "repeat") if c in names]
    select = ", ".join(f'"{c}"' for c in names)
    sql = f"SELECT {select} FROM read_parquet($files, union_by_name = true)"
    if order:
        sql += f" ORDER BY {', '.join(order)}"
    con = connect(files, storage_options)
    try:
        return con.sql(sql, params={"files": [_duckdb_path(f) for f in files]}).pl()
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
