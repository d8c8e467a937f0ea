"""The metrics environments declare over their `info` JSON (envs.base.MetricSpec), computed in SQL.

Everything comes from the declarations passed in: this module knows no benchmark and no info key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from envs.base import MetricSpec
from tasks.analysis.queries import rows, sql_string
from tasks.analysis.stats import wilson

# Counts include errored rollouts (whatever info they carry); rates and means look at completed ones.
_COUNTS_SQL = """
SELECT benchmark, key, value, count(*) AS count
FROM (
    SELECT r.benchmark, s.key, json_extract_string(r.info, s.path) AS value
    FROM rollouts r JOIN env_count_specs s USING (benchmark)
    WHERE json_valid(r.info)
)
WHERE value IS NOT NULL GROUP BY ALL ORDER BY benchmark, key, count DESC, value
"""


def json_path(key: str) -> str:
    """A JSON pointer for a top-level key (any characters, '~' and '/' escaped)."""
    return "/" + key.replace("~", "~0").replace("/", "~1")


def _rates_and_means(
    con: duckdb.DuckDBPyConnection, bench: str, specs: list[MetricSpec]
) -> list[tuple[int | float | None, int]]:
    """Per spec: (trues, booleans) for a rate, (mean, numbers) for a mean; one JSON parse per row.

    A value is boolean when its JSON text is exactly true/false (a string "true" is '"true"'), and a
    number when it casts to DOUBLE (a quoted number does not).
    """
    paths = "[" + ", ".join(sql_string(json_path(s.key)) for s in specs) + "]"
    aggs = []
    for i, spec in enumerate(specs, start=1):
        if spec.kind == "rate":
            aggs.append(f"sum((v[{i}] = 'true')::INT) AS a{i}, sum((v[{i}] IN ('true', 'false'))::INT) AS b{i}")
        else:
            aggs.append(f"avg(try_cast(v[{i}] AS DOUBLE)) AS a{i}, count(try_cast(v[{i}] AS DOUBLE)) AS b{i}")
    sql = f"""
        SELECT {", ".join(aggs)} FROM (
            SELECT json_extract(info, {paths})::VARCHAR[] AS v FROM rollouts
            WHERE benchmark = $bench AND error IS NULL AND json_valid(info))
    """
    (row,) = con.execute(sql, {"bench": bench}).fetchall()
    return [(row[2 * i], int(row[2 * i + 1] or 0)) for i in range(len(specs))]


def _counts(
    con: duckdb.DuckDBPyConnection, specs: Mapping[str, Sequence[MetricSpec]]
) -> dict[tuple[str, str], dict[str, int]]:
    """{(benchmark, key): {value: rollouts}} for every "counts" spec, most frequent value first."""
    wanted = [(bench, s.key, json_path(s.key)) for bench, ss in specs.items() for s in ss if s.kind == "counts"]
    if not wanted:
        return {}
    table = pa.table({name: [w[i] for w in wanted] for i, name in enumerate(("benchmark", "key", "path"))})
    con.register("env_count_specs", table)
    try:
        found = rows(con, _COUNTS_SQL)
    finally:
        con.unregister("env_count_specs")
    out: dict[tuple[str, str], dict[str, int]] = {}
    for row in found:
        out.setdefault((row["benchmark"], row["key"]), {})[row["value"]] = row["count"]
    return out


def env_metrics(
    con: duckdb.DuckDBPyConnection, specs: Mapping[str, Sequence[MetricSpec]], errors: Mapping[str, int]
) -> dict[str, list[dict[str, Any]]]:
    """Per benchmark, its declared metrics in declaration order (core.schema.EnvMetric's fields);
    `errors` is each benchmark's errored-rollout count (they count as false in rates). A metric no
    rollout carries is left out."""
    counts = _counts(con, specs)
    out: dict[str, list[dict[str, Any]]] = {}
    for bench, bench_specs in specs.items():
        numeric = [s for s in bench_specs if s.kind in ("rate", "mean")]
        stats = dict(zip(numeric, _rates_and_means(con, bench, numeric), strict=True)) if numeric else {}
        metrics = []
        for spec in bench_specs:
            base = {
                "key": spec.key,
                "label": spec.label,
                "kind": spec.kind,
                "headline": spec.headline,
                "description": spec.description,
            }
            if spec.kind == "counts":
                found = counts.get((bench, spec.key))
                if found:
                    metrics.append({**base, "n": sum(found.values()), "counts": found})
                continue
            value, n = stats[spec]
            if not n:
                continue
            if spec.kind == "rate":
                n += errors.get(bench, 0)
                value = int(value or 0) / n
                metrics.append({**base, "value": value, "n": n, "ci": wilson(value, n)})
            else:
                metrics.append({**base, "value": value, "n": n})
        out[bench] = metrics
    return out
