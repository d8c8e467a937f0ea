"""Per-rollout rows for report tables and the rollout browser, deduplicated like the metrics."""

from __future__ import annotations

import duckdb
import polars as pl

from core.schema import ROLLOUT_SCHEMA
from core.store import Store
from tasks.analysis.load import check_versions, connect, duckdb_path, read_error
from tasks.analysis.queries import sql_string


def load_rollouts_frame(
    files: list[str],
    store: Store,
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
    params = {"files": [duckdb_path(f) for f in files]}
    source = "read_parquet($files, union_by_name = true, filename = true)"
    keys = "benchmark, prompt_id, repeat, created_at, filename"
    newest = f"SELECT {keys} FROM {source}"
    if dedupe:
        newest += (
            " QUALIFY row_number() OVER ("
            "PARTITION BY benchmark, prompt_id, repeat ORDER BY created_at DESC, filename DESC) = 1"
        )
    select = ", ".join(f'r."{c}"' for c in names)
    con = connect(files, store)
    try:
        check_versions(con, files)
        if per_benchmark_limit is None:
            picked = "SELECT * FROM newest"
        else:
            benches = [b for (b,) in con.execute(f"SELECT DISTINCT benchmark FROM {source}", params).fetchall()]
            n = int(per_benchmark_limit)
            picked = (
                " UNION ALL ".join(
                    f"(SELECT * FROM newest WHERE benchmark = {sql_string(b)} ORDER BY prompt_id, repeat LIMIT {n})"
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
        raise read_error(files, exc) from exc
    finally:
        con.close()
