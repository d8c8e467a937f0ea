"""The metrics environments declare over their `info` JSON (envs.base.MetricSpec), computed in SQL.

Everything comes from the declarations passed in: this module knows no benchmark and no info key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import duckdb

from core.metrics_doc import EnvMetric
from envs.base import MetricSpec
from tasks.analysis.stats import wilson_ci


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


def _stats(
    con: duckdb.DuckDBPyConnection, bench: str, specs: Sequence[MetricSpec], keys: list[str]
) -> list[tuple[Any, int]]:
    """One scan of the benchmark's rows: each spec's (a, b) pair (see _aggregates); `a` is a number, a
    {value: count} map (counts) or None, `b` the count it is over."""
    aggs = ", ".join(_aggregates(spec, keys.index(spec.key) + 1) for spec in specs)
    (row,) = con.execute(f"SELECT {aggs} FROM rollouts WHERE benchmark = $bench", {"bench": bench}).fetchall()
    return [(row[2 * i], int(row[2 * i + 1] or 0)) for i in range(len(specs))]


def env_metrics(
    con: duckdb.DuckDBPyConnection, specs: Mapping[str, Sequence[MetricSpec]], errors: Mapping[str, int]
) -> dict[str, list[EnvMetric]]:
    """Per benchmark, its declared metrics in declaration order, from the `rollouts` table's `env` column
    (laid out by env_keys); `errors` is each benchmark's errored-rollout count (they count as false in
    rates). A metric no rollout carries is left out."""
    out: dict[str, list[EnvMetric]] = {}
    for bench, bench_specs in specs.items():
        stats = _stats(con, bench, bench_specs, env_keys({bench: bench_specs})[bench]) if bench_specs else []
        out[bench] = [
            _metric(spec, value, n, errors.get(bench, 0))
            for spec, (value, n) in zip(bench_specs, stats, strict=True)
            if n
        ]
    return out


def headline_rates_by_prompt(
    con: duckdb.DuckDBPyConnection, specs: Mapping[str, Sequence[MetricSpec]]
) -> dict[str, dict[str, dict[str, tuple[int, int]]]]:
    """Per benchmark, per prompt, each headline rate's (trues, n) over the prompt's rollouts, counted as the rate
    itself is (errored rollouts count as false): what a paired comparison of two runs' rates needs."""
    out: dict[str, dict[str, dict[str, tuple[int, int]]]] = {}
    for bench, bench_specs in specs.items():
        rates = [s for s in bench_specs if s.kind == "rate" and s.headline]
        if not rates:
            continue
        keys = env_keys({bench: bench_specs})[bench]
        values = [f"env[{keys.index(s.key) + 1}]" for s in rates]
        cols = ", ".join(
            f"count(*) FILTER (error IS NULL AND {v} = 'true'), "
            f"count(*) FILTER (error IS NULL AND {v} IN ('true', 'false') OR error IS NOT NULL)"
            for v in values
        )
        sql = f"SELECT prompt_id, {cols} FROM rollouts WHERE benchmark = $bench GROUP BY prompt_id"
        by_prompt = out.setdefault(bench, {})
        for prompt_id, *counts in con.execute(sql, {"bench": bench}).fetchall():
            pairs = zip(counts[0::2], counts[1::2], strict=True)
            # a prompt where no rollout carried the rate (and none errored) has nothing to pair
            by_prompt[str(prompt_id)] = {s.key: (int(t), int(n)) for s, (t, n) in zip(rates, pairs, strict=True) if n}
    return out


def _metric(spec: MetricSpec, value: Any, n: int, errors: int) -> EnvMetric:
    """The metric of `spec` from its aggregates (value, n) (see _aggregates); a rate's `n` gains the
    benchmark's `errors` (errored rollouts count as false)."""
    counts = ci = None
    if spec.kind == "counts":  # most frequent first, ties by value (a stable document)
        value, counts = None, dict(sorted(value.items(), key=lambda kv: (-kv[1], kv[0])))
    elif spec.kind in ("rate", "items"):  # items: n counts items, the interval treats them as independent (lm-eval)
        n += errors if spec.kind == "rate" else 0
        value = int(value or 0) / n
        ci = wilson_ci(value, n)
    return EnvMetric(
        key=spec.key,
        label=spec.label,
        kind=spec.kind,
        headline=spec.headline,
        description=spec.description,
        value=value,
        n=n,
        ci=ci,
        counts=counts,
    )
