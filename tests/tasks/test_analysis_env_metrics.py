"""Env metrics: computed from the metrics environments declare, and from nothing else."""

from __future__ import annotations

import io
import keyword
import sys
import tokenize
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.schema import ROLLOUT_SCHEMA, RolloutRecord
from envs.base import MetricSpec
from envs.registry import ENVS, metric_specs
from tasks.analysis.metrics import compute_metrics
from tasks.analysis.stats import wilson_interval

ANALYSIS = Path(__file__).resolve().parents[2] / "tasks" / "analysis"


def rate(key: str, **kw: Any) -> MetricSpec:
    return MetricSpec(key, key, "rate", **kw)


def by_key(bm: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["key"]: m for m in bm["env_metrics"]}


def test_rates_average_boolean_values_and_count_errors_as_false(make_rollout, metrics_of) -> None:
    rows = [
        make_rollout(prompt_id="a", info={"strict_correct": True, "flexible_correct": True, "extracted": "2"}),
        make_rollout(prompt_id="b", info={"strict_correct": False, "flexible_correct": True, "n": 3}),
        make_rollout(prompt_id="c", info={"strict_correct": False, "flexible_correct": False, "a/b~": True}),
        make_rollout(prompt_id="d", info={"strict_correct": True}, error="boom"),  # errors count as false
    ]
    specs = {"gsm8k": [rate(k) for k in ("strict_correct", "flexible_correct", "a/b~", "extracted", "n")]}
    bm = metrics_of(rows, specs)["benchmarks"]["gsm8k"]
    values = {m["key"]: m["value"] for m in bm["env_metrics"]}
    # "extracted" (a string) and "n" (a number) are not booleans: not counted, so not reported.
    assert values == pytest.approx({"a/b~": 0.5, "flexible_correct": 0.5, "strict_correct": 0.25})
    assert [m["key"] for m in bm["env_metrics"]] == ["strict_correct", "flexible_correct", "a/b~"]  # declared order


def test_rate_intervals(make_rollout, metrics_of) -> None:
    rows = [make_rollout(prompt_id=f"p{i}", info={"strict_correct": i < 8}) for i in range(10)]
    spec = MetricSpec("strict_correct", "strict", "rate", headline=True, description="strict-match")
    strict = by_key(metrics_of(rows, {"gsm8k": [spec]})["benchmarks"]["gsm8k"])["strict_correct"]
    assert (strict["label"], strict["headline"], strict["description"]) == ("strict", True, "strict-match")
    assert strict["value"] == 0.8 and strict["n"] == 10 and strict["counts"] is None
    ci = strict["ci"]
    assert ci["n"] == 10 and ci["method"] == "wilson"
    assert (round(ci["low"], 3), round(ci["high"], 3)) == (0.490, 0.943)
    assert (ci["low"], ci["high"]) == pytest.approx(wilson_interval(0.8, 10))


def test_means_average_numbers_of_completed_rollouts(make_rollout, metrics_of) -> None:
    rows = [
        make_rollout(prompt_id="a", info={"cleared_rows": 1, "pieces_locked": 2.5}),
        make_rollout(prompt_id="b", info={"cleared_rows": 0, "pieces_locked": "3"}),  # a string is no number
        make_rollout(prompt_id="c", info={"cleared_rows": True}),  # nor is a boolean
        make_rollout(prompt_id="d", info={"cleared_rows": 5}, error="boom"),  # errored: not averaged
    ]
    specs = {"tetris": [MetricSpec("cleared_rows", "rows", "mean"), MetricSpec("pieces_locked", "pieces", "mean")]}
    rows = [{**r, "benchmark": "tetris"} for r in rows]
    metrics = by_key(metrics_of(rows, specs)["benchmarks"]["tetris"])
    assert (metrics["cleared_rows"]["value"], metrics["cleared_rows"]["n"]) == (0.5, 2)
    assert (metrics["pieces_locked"]["value"], metrics["pieces_locked"]["n"]) == (2.5, 1)
    assert metrics["cleared_rows"]["ci"] is None


def test_counts_most_frequent_first(make_rollout, metrics_of) -> None:
    outcomes = ["fail", "pass", "timeout", "pass", "fail", "pass", None]
    rows = [
        make_rollout(benchmark="mbpp", prompt_id=f"p{i}", info={} if o is None else {"outcome": o})
        for i, o in enumerate(outcomes)
    ]
    rows.append(make_rollout(benchmark="mbpp", prompt_id="err", info={"outcome": "error"}, error="x"))
    specs = {"mbpp": [MetricSpec("outcome", "sandbox outcome", "counts")]}
    outcome = by_key(metrics_of(rows, specs)["benchmarks"]["mbpp"])["outcome"]
    assert outcome["counts"] == {"pass": 3, "fail": 2, "error": 1, "timeout": 1}  # ties: by value
    assert list(outcome["counts"]) == ["pass", "fail", "error", "timeout"]
    assert outcome["n"] == 7 and outcome["value"] is None and outcome["ci"] is None


def test_sandbox_outcomes_and_end_reasons_from_the_envs_declarations(write_batch, make_rollout, local_store) -> None:
    rows = [
        make_rollout(benchmark="mbpp", prompt_id="p0", repeat=0, info={"outcome": "pass"}),
        make_rollout(benchmark="mbpp", prompt_id="p0", repeat=1, info={"outcome": "timeout"}),
        make_rollout(benchmark="mbpp", prompt_id="p1", repeat=0, info={"outcome": "pass"}),
        make_rollout(benchmark="tetris", prompt_id="t0", repeat=0, info={"end_reason": "lockout"}),
        make_rollout(benchmark="gsm8k", prompt_id="g0", repeat=0, info={"strict_correct": True}),
    ]
    metrics = compute_metrics([write_batch(rows)], local_store, metric_specs(["mbpp", "tetris", "gsm8k"]))
    counts = {
        name: {m.key: m.counts for m in bm.env_metrics if m.kind == "counts"} for name, bm in metrics.benchmarks.items()
    }
    assert counts == {
        "mbpp": {"outcome": {"pass": 2, "timeout": 1}},
        "tetris": {"end_reason": {"lockout": 1}},
        "gsm8k": {},
    }
    strict = metrics.benchmarks["gsm8k"].env_metric("strict_correct")
    assert strict is not None and strict.headline and strict.value == 1.0


def test_a_benchmark_without_specs_gets_no_env_metrics(make_rollout, write_batch, local_store) -> None:
    gsm = [make_rollout(prompt_id="g", info={"strict_correct": True})]
    tetris = [make_rollout(benchmark="tetris", prompt_id=f"game-{i}", info={"cleared": False}) for i in range(3)]
    files = [write_batch(gsm), write_batch(tetris)]
    metrics = compute_metrics(files, local_store, {"tetris": [rate("cleared")]})
    assert [(m.key, m.value) for m in metrics.benchmarks["tetris"].env_metrics] == [("cleared", 0.0)]
    assert metrics.benchmarks["gsm8k"].env_metrics == []
    assert all(not bm.env_metrics for bm in compute_metrics(files, local_store).benchmarks.values())


def test_metrics_no_rollout_carries_are_left_out(make_rollout, metrics_of) -> None:
    errored = [make_rollout(prompt_id=f"p{i}", error="ConnectError: refused", info={}) for i in range(3)]
    specs = {"gsm8k": [rate("strict_correct"), MetricSpec("x", "x", "mean"), MetricSpec("y", "y", "counts")]}
    assert metrics_of(errored, specs)["benchmarks"]["gsm8k"]["env_metrics"] == []


def test_invalid_info_json_is_skipped(make_rollout, tmp_path, local_store) -> None:
    rows = [make_rollout(prompt_id=p, info={"ok": p == "a"}) for p in "abcd"]
    stored = [RolloutRecord.model_validate(r).to_row() for r in rows]
    stored[2]["info"], stored[3]["info"] = "{not json", "[1, 2]"  # what no writer of today produces
    path = tmp_path / "odd.parquet"
    pq.write_table(pa.Table.from_pylist(stored, schema=ROLLOUT_SCHEMA), path)
    specs = {"gsm8k": [rate("ok"), MetricSpec("ok", "ok", "counts")]}
    bm = compute_metrics([str(path)], local_store, specs).benchmarks["gsm8k"]
    assert [(m.kind, m.value, m.counts) for m in bm.env_metrics] == [
        ("rate", 0.5, None),
        ("counts", None, {"false": 1, "true": 1}),
    ]


def _words_in(source: str) -> list[str]:
    """Identifiers (not stdlib modules), and words of strings and comments, of a Python source."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string):
            out.append(tok.string)
        elif tok.type in (tokenize.STRING, tokenize.COMMENT):
            out += "".join(c if c.isalnum() or c == "_" else " " for c in tok.string).split()
    return out


def test_generic_analysis_names_no_benchmark_and_no_env_key() -> None:
    env_words = set(ENVS) | {spec.key for env in ENVS.values() for spec in env.metrics}
    for path in sorted(ANALYSIS.glob("*.py")):
        words = set(_words_in(path.read_text())) - set(sys.stdlib_module_names)
        assert not words & env_words, f"{path.name} names {sorted(words & env_words)}"


def test_items_are_a_micro_average_over_all_rollouts_items(make_rollout, metrics_of) -> None:
    """lm-eval's instruction-level accuracy: true items over all items, not the mean of per-rollout shares."""
    rows = [
        make_rollout(prompt_id="a", info={"inst": [True, True, True, False]}),  # 3 of 4
        make_rollout(prompt_id="b", info={"inst": [False]}),  # 0 of 1
        make_rollout(prompt_id="c", info={"inst": [True, "true", 1, None]}),  # only booleans are items: 1 of 1
        make_rollout(prompt_id="d", info={"inst": "true"}),  # not a list: no items
        make_rollout(prompt_id="e", info={"inst": [True, True]}, error="boom"),  # an errored rollout has none
    ]
    bm = metrics_of(rows, {"gsm8k": [MetricSpec("inst", "inst level", "items")]})["benchmarks"]["gsm8k"]
    inst = by_key(bm)["inst"]
    assert (inst["value"], inst["n"]) == (pytest.approx(4 / 6), 6)  # the macro mean would be (0.75 + 0 + 1) / 3
    assert (inst["ci"]["low"], inst["ci"]["high"]) == pytest.approx(wilson_interval(4 / 6, 6))
