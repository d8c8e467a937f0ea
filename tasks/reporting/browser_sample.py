"""The rollout browser's sample: up to N rollouts per benchmark, spread over every prompt, chosen in DuckDB.

The choice is deterministic (a hash of prompt id and repeat, no random state) and ordered by priority, so
cutting the list anywhere keeps the most useful rollouts:

1. "special" rollouts first: up to `n // 5` errors, and the `n // 20` highest and lowest rewards;
2. then rounds over the prompts: round 1 takes one rollout of every prompt, round 2 a second one, ...;
   within a prompt the rounds cycle through its outcomes (correct, wrong, error), so a prompt with mixed
   results shows both before it shows two of a kind. Prompts are visited in hash order, so when N is
   smaller than the number of prompts, the prompts shown are spread over the whole benchmark.

Only the small key columns of every row are scanned to choose, with aggregates (top-N per group) rather
than sorts of every row; the text columns are read for the chosen rows only. Deduplication matches
tasks/analysis (the newest copy of a (benchmark, prompt, repeat) wins).
"""

from __future__ import annotations

import math
from typing import cast

import duckdb
import polars as pl

from core.schema import ROLLOUT_SCHEMA
from core.store import Store
from tasks.analysis.load import check_versions, connect, duckdb_path, read_error, scalar

SALT = "evalflow-browser"  # part of every hash: the sample does not follow the prompt ids' order
SOURCE = "read_parquet($files, union_by_name = true, filename = true)"
KEYS = "benchmark, prompt_id, repeat, created_at, filename"

# Every row's keys, verdict (0 correct, 1 wrong, 2 error), reward as the analysis counts it, and hash.
KEYED = f"""
    CREATE TEMP TABLE keyed AS
    SELECT {KEYS},
           CASE WHEN error IS NOT NULL THEN 2 WHEN success THEN 0 ELSE 1 END AS verdict,
           CASE WHEN error IS NULL THEN reward ELSE 0.0 END AS eff_reward,
           hash(prompt_id, repeat, $salt) AS h
    FROM {SOURCE}
"""
NEWEST = (
    " QUALIFY row_number() OVER (PARTITION BY benchmark, prompt_id, repeat ORDER BY created_at DESC, filename DESC) = 1"
)

# The chosen rows and their priority `pick` (1 = first). A row of round r is among the r smallest hashes
# of its verdict in its prompt, so the top-$rounds per (prompt, verdict) are all the candidates rounds
# 1..$rounds need; $rounds covers $n rows whenever prompts have $rounds rollouts each.
CHOSEN = """
    CREATE TEMP TABLE chosen AS
    WITH special AS (
        SELECT benchmark, prompt_id, repeat FROM keyed WHERE verdict = 2
        QUALIFY row_number() OVER (PARTITION BY benchmark ORDER BY h) <= $errors
        UNION
        SELECT benchmark, unnest(max_by({'prompt_id': prompt_id, 'repeat': repeat}, (eff_reward, h), $quota),
                                 recursive := true)
        FROM keyed GROUP BY benchmark
        UNION
        SELECT benchmark, unnest(min_by({'prompt_id': prompt_id, 'repeat': repeat}, (eff_reward, h), $quota),
                                 recursive := true)
        FROM keyed GROUP BY benchmark
    ), candidates AS (
        SELECT benchmark, prompt_id, verdict,
               unnest(min_by({'repeat': repeat, 'h': h}, h, $rounds), recursive := true)
        FROM keyed GROUP BY benchmark, prompt_id, verdict
    ), rounds AS (
        SELECT benchmark, prompt_id, repeat,
               row_number() OVER (PARTITION BY benchmark, prompt_id ORDER BY k_verdict, h) AS round
        FROM (SELECT *, row_number() OVER (PARTITION BY benchmark, prompt_id, verdict ORDER BY h) AS k_verdict
              FROM candidates)
    ), ranked AS (
        SELECT benchmark, prompt_id, repeat,
               row_number() OVER (
                   PARTITION BY benchmark
                   ORDER BY s.repeat IS NOT NULL DESC, r.round NULLS LAST, hash(prompt_id, $salt),
                            hash(prompt_id, repeat, $salt)
               ) AS pick
        FROM rounds r FULL OUTER JOIN (SELECT *, true AS special FROM special) s USING (benchmark, prompt_id, repeat)
        QUALIFY pick <= $n
    )
    SELECT k.benchmark, k.prompt_id, k.repeat, k.created_at, k.filename, ranked.pick
    FROM ranked JOIN keyed k USING (benchmark, prompt_id, repeat)
"""


_SQL_TYPES = {"string": "VARCHAR", "int64": "BIGINT", "int32": "INTEGER", "bool": "BOOLEAN", "double": "DOUBLE"}


def sample_rollouts(files: list[str], store: Store, columns: list[str], n: int, dedupe: bool = True) -> pl.DataFrame:
    """Up to `n` rollouts per benchmark (`columns` plus `pick`, the priority), ordered by benchmark and pick."""
    if not files:
        empty = cast(pl.DataFrame, pl.from_arrow(ROLLOUT_SCHEMA.empty_table().select(columns)))  # a Table's frame
        return empty.with_columns(pick=pl.lit(0, pl.Int64))
    files_param = {"files": [duckdb_path(f) for f in files]}
    con = connect(files, store)
    try:
        check_versions(con, files)
        # a column newer than every file (rollout schema 3's reasoning in an older run) reads as null
        present = {
            row[0] for row in con.execute("SELECT DISTINCT name FROM parquet_schema($files)", files_param).fetchall()
        }
        types = {f.name: f.type for f in ROLLOUT_SCHEMA}
        select = ", ".join(
            f'r."{c}"' if c in present or c not in types else f'NULL::{_SQL_TYPES[str(types[c])]} AS "{c}"'
            for c in columns
        )
        con.execute(KEYED + (NEWEST if dedupe else ""), {**files_param, "salt": SALT})
        fewest = scalar(
            con.execute("SELECT min(p) FROM (SELECT count(DISTINCT prompt_id) AS p FROM keyed GROUP BY ALL)")
        )
        rounds = min(n, math.ceil(n / fewest)) if fewest else 1
        quotas = {"n": n, "errors": max(1, n // 5), "quota": max(1, n // 20), "rounds": rounds}
        con.execute(CHOSEN, {"salt": SALT, **quotas})
        sql = f"SELECT {select}, c.pick FROM {SOURCE} r JOIN chosen c USING ({KEYS}) ORDER BY r.benchmark, c.pick"
        return con.sql(sql, params=files_param).pl()
    except (duckdb.Error, OSError) as exc:
        raise read_error(files, exc) from exc
    finally:
        con.close()
