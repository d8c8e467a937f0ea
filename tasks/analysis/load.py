"""Reading a run's batch files into DuckDB: connection, schema-version check, deduplicated `rollouts` table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import duckdb

from core.schema import SCHEMA_VERSION_KEY, check_schema_version
from core.store import Store, StoreError
from tasks.analysis.queries import sql_string

# Columns the metrics need; the big text columns (messages, transcript, completion) stay on disk.
METRIC_COLUMNS = (
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
)
# Columns of rollout schema 3 (core/schema.py), read as null from older files: name -> DuckDB type.
NEWER_COLUMNS = {"reasoning_tokens": "BIGINT", "answer_tokens": "BIGINT", "ended_in_reasoning": "BOOLEAN"}


def duckdb_path(url: str) -> str:
    """DuckDB reads local paths itself; file:// is stripped, other schemes go through fsspec."""
    return url[len("file://") :] if url.startswith("file://") else url


def connect(files: list[str], store: Store) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that can read `files` through the store's filesystems."""
    con = duckdb.connect(":memory:")
    store.register(con, files)
    return con


def read_error(files: list[str], exc: Exception) -> StoreError:
    shown = ", ".join(files[:3]) + (f" (+{len(files) - 3} more)" if len(files) > 3 else "")
    return StoreError(f"cannot read rollout files {shown}: {type(exc).__name__}: {exc}")


def check_versions(con: duckdb.DuckDBPyConnection, files: list[str]) -> None:
    """Refuse files written with a rollout schema newer than this code (footers only: no row is read)."""
    try:
        found = con.execute(
            "SELECT file_name, value FROM parquet_kv_metadata($files) WHERE key = $key",
            {"files": [duckdb_path(f) for f in files], "key": SCHEMA_VERSION_KEY},
        ).fetchall()
    except (duckdb.Error, OSError) as exc:
        raise read_error(files, exc) from exc
    for file_name, value in found:
        check_schema_version(file_name, value)


def json_path(key: str) -> str:
    """A JSON pointer for a top-level key (any characters, '~' and '/' escaped)."""
    return "/" + key.replace("~", "~0").replace("/", "~1")


def _env_values(keys: Mapping[str, Sequence[str]]) -> str:
    """SQL for `env`: per benchmark, the JSON text of each wanted `info` key (in the given order).

    One JSON parse per row of a benchmark that wants keys, none for the others; invalid JSON gives a
    null list. A JSON null reads 'null' and a missing key NULL, so rates and means see only real values.
    """
    cases = [
        f"WHEN {sql_string(bench)} THEN try(json_extract(info, [{', '.join(sql_string(json_path(k)) for k in ks)}]))"
        for bench, ks in keys.items()
        if ks
    ]
    return f"CASE benchmark {' '.join(cases)} END" if cases else "NULL::VARCHAR[]"


def scalar(result: duckdb.DuckDBPyConnection) -> Any:
    """The one value of a query's one row: an aggregate's (`SELECT count(*) ...` always returns its row)."""
    row = result.fetchone()
    assert row is not None, "an aggregate query returns one row"
    (value,) = row
    return value


def load(con: duckdb.DuckDBPyConnection, files: list[str], env_keys: Mapping[str, Sequence[str]] | None = None) -> int:
    """Materialise the deduplicated `rollouts` table in one scan and one sort; returns duplicates dropped.

    `env_keys` names, per benchmark, the `info` keys its environment metrics read: they are copied
    into the `env` list column during the scan (tasks/analysis/env_metrics.py reads them by position),
    so the large `info` text is parsed once and never kept.

    Each prompt's rows are ordered by (repeat, newest `created_at`, last file name: the copy the rollout
    browser's sample keeps too, tasks/reporting/browser_sample.py); a row whose predecessor has the same
    repeat is a stale duplicate.
    `pos`, the 1-based position of a repeat among its prompt's repeats (maj@k votes with pos <= k), is a
    dense rank by repeat alone, so a duplicate never takes the place of the next repeat.
    """
    check_versions(con, files)
    params = {"files": [duckdb_path(f) for f in files]}
    try:
        present = {row[0] for row in con.execute("SELECT DISTINCT name FROM parquet_schema($files)", params).fetchall()}
    except (duckdb.Error, OSError) as exc:
        raise read_error(files, exc) from exc
    newer = [f'"{c}"' if c in present else f'NULL::{t} AS "{c}"' for c, t in NEWER_COLUMNS.items()]
    cols = ", ".join([*(f'"{c}"' for c in METRIC_COLUMNS), *newer])
    try:
        con.execute(
            f"""
            CREATE TEMP TABLE rollouts AS
            SELECT * EXCLUDE (prev_repeat),
                   CASE WHEN error IS NULL THEN reward ELSE 0.0 END AS eff_reward,
                   coalesce(success AND error IS NULL, false) AS ok,
                   coalesce(ended_in_reasoning OR reasoning_tokens > 0, false) AS has_reasoning
            FROM (
                SELECT {cols}, {_env_values(env_keys or {})}::VARCHAR[] AS env, lag(repeat) OVER w AS prev_repeat,
                       prompt_hash, dense_rank() OVER (PARTITION BY benchmark, prompt_id ORDER BY repeat) AS pos
                -- the prompt's hash is taken before the window, which then holds 16 characters, not the messages
                FROM (
                    SELECT * EXCLUDE (messages), left(md5(messages), 16) AS prompt_hash
                    FROM read_parquet($files, union_by_name = true, filename = true)
                )
                WINDOW w AS (PARTITION BY benchmark, prompt_id ORDER BY repeat, created_at DESC, filename DESC)
            )
            WHERE prev_repeat IS DISTINCT FROM repeat
            """,
            params,
        )
        kept = scalar(con.execute("SELECT count(*) FROM rollouts"))
        raw = scalar(con.execute("SELECT count(*) FROM read_parquet($files, union_by_name = true)", params))
    except (duckdb.Error, OSError) as exc:
        raise read_error(files, exc) from exc
    return raw - kept
