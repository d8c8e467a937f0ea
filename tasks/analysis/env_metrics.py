"""The metrics environments declare over their `info` JSON (envs.base.MetricSpec), computed in SQL.

Everything comes from the declarations passed in: this module knows no benchmark and no info key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import duckdb

from envs.base import MetricSpec
from tasks.analysis.stats import wilson


def env_keys(specs: Mapping[str, Sequence[MetricSpec]]) -> dict[str, list[str]]:
    """Per benchmark, the distinct `info` keys its specs read, in declaration order: the `env` column's
    layout (tasks/analysis/load.py extracts them while scanning the files)."""
    return {bench: list(dict.fromkeys(s.key for s in ss)) for bench, ss in specs.items()}


def _aggregates(spec: MetricSpec, i: int) -> str:
    """(a, b) per spec over the `env` value at position i: (trues, booleans) for a rate, (mean, numbers)
    for a mean, (counts per value as a map, rollouts carrying one) for counts, (true items, boolean items)
    over the JSON lists of items.

    A value is boolean when its JSON text is exactly true/false (a string "true" is '"true"'), and a
    number when it casts to DOUBLE (a quoted number does not). Counts read the value as a string (a
    JSON string unquoted, anything else as JSON text) and include errored rollouts, whatever their info;
    rates and means look at completed rollouts only.
    """
    v = f"env[{i}]"
    if spec.kind == "rate":
        ok = "error IS NULL"
        return f"count(*) FILTER ({ok} AND {v} = 'true'), count(*) FILTER ({ok} AND {v} IN ('true', 'false'))"
    if spec.kind == "items":  # completed rollouts' lists: an errored rollout has no items to count
        ok, items = f"error IS NULL AND json_type({v}) = 'ARRAY'", f"json_extract({v}, '$[*]')"
        trues = f"len(list_filter({items}, lambda x: x::VARCHAR = 'true'))"
        booleans = f"len(list_filter({items}, lambda x: x::VARCHAR IN ('true', 'false')))"
        return f"sum({trues}) FILTER ({ok}), sum({booleans}) FILTER ({ok})"
    if spec.kind == "mean":
        number = f"try_cast({v} AS DOUBLE)"
        return f"avg({number}) FILTER (error IS NULL), count({number}) FILTER (error IS NULL)"
    text = f"json_extract_string({v}, '$')"
    return f"histogram({text}), count({text})"


def _stats(con: duckdb.DuckDBPyConnection, bench: str, specs: Sequence[MetricSpec], keys: list[str]) -> list[Any]:
    """One scan of the benchmark's rows: each spec's (a, b) pair (see _aggregates)."""
    aggs = ", ".join(_aggregates(spec, keys.index(spec.key) + 1) for spec in specs)
    (row,) = con.execute(f"SELECT {aggs} FROM rollouts WHERE benchmark = $bench", {"bench": bench}).fetchall()
    return [(row[2 * i], int(row[2 * i + 1] or 0)) for i in range(len(specs))]


def env_metrics(
    con: duckdb.DuckDBPyConnection, specs: Mapping[str, Sequence[MetricSpec]], errors: Mapping[str, int]
) -> dict[str, list[dict[str, Any]]]:
    """Per benchmark, its declared metrics in declaration order (core.schema.EnvMetric's fields), from the
    `rollouts` table's `env` column (laid out by env_keys); `errors` is each benchmark's errored-rollout
    count (they count as false in rates). A metric no rollout carries is left out."""
    out: dict[str, list[dict[str, Any]]] = {}
    for bench, bench_specs in specs.items():
        stats = _stats(con, bench, bench_specs, env_keys({bench: bench_specs})[bench]) if bench_specs else []
        metrics = []
        for spec, (value, n) in zip(bench_specs, stats, strict=True):
            base = {
                "key": spec.key,
                "label": spec.label,
                "kind": spec.kind,
                "headline": spec.headline,
                "description": spec.description,
            }
            if not n:
                continue
            if spec.kind == "counts":
                # most frequent first, ties by value (a stable document)
                found = dict(sorted(value.items(), key=lambda kv: (-kv[1], kv[0])))
                metrics.append({**base, "n": n, "counts": found})
            elif spec.kind == "rate":
                n += errors.get(bench, 0)
                rate = int(value or 0) / n
                metrics.append({**base, "value": rate, "n": n, "ci": wilson(rate, n)})
            elif spec.kind == "items":  # n counts items; the interval treats them as independent, as lm-eval does
                share = int(value or 0) / n
                metrics.append({**base, "value": share, "n": n, "ci": wilson(share, n)})
            else:
                metrics.append({**base, "value": value, "n": n})
        out[bench] = metrics
    return out
