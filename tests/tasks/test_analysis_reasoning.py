"""The reasoning block of the metrics: cut-off rate, token means and distributions, accuracy by reasoning length;
old files (rollout schema 2, no reasoning columns) still analyse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from core.schema import SCHEMA_VERSION_KEY, to_table
from tasks.analysis.metrics import compute_metrics


def thinking(make_rollout: Any, pid: str, repeat: int, tokens: int, ok: bool, ended: bool = False) -> dict[str, Any]:
    return make_rollout(
        prompt_id=pid, repeat=repeat, success=ok and not ended, reward=float(ok and not ended),
        reasoning="hmm " * tokens, reasoning_tokens=tokens, answer_tokens=0 if ended else 10,
        completion_tokens=tokens + (0 if ended else 10), ended_in_reasoning=ended,
        finish_reason="length" if ended else "stop", parsed_answer=None if ended else "7",
    )  # fmt: skip


def test_reasoning_stats_count_cut_off_rollouts_apart_from_parse_errors(make_rollout, metrics_of) -> None:
    rows = [
        thinking(make_rollout, f"p{i}", r, tokens=10 * (i + 1) + r, ok=i % 2 == 0) for i in range(8) for r in range(2)
    ]
    rows += [thinking(make_rollout, "p8", r, tokens=500, ok=True, ended=True) for r in range(2)]
    bench = metrics_of(rows)["benchmarks"]["gsm8k"]
    stats = bench["reasoning"]
    assert (stats["with_reasoning"], stats["counted"], stats["ended_in_reasoning"], stats["at_limit"]) == (18, 18, 2, 2)
    assert abs(stats["ended_in_reasoning_rate"] - 2 / 18) < 1e-9
    assert 0 < stats["ended_in_reasoning_ci"]["low"] < 2 / 18 < stats["ended_in_reasoning_ci"]["high"]
    # cut-off rollouts are no success and no parse error: they are their own outcome
    assert bench["successes"] == 8 and bench["parse_error_rate"] == 0.0
    mean = (sum(10 * (i + 1) + r for i in range(8) for r in range(2)) + 1000) / 18
    assert abs(stats["reasoning_tokens_mean"] - mean) < 1e-9
    assert bench["distributions"]["reasoning_tokens"]["count"] == 18
    assert bench["distributions"]["answer_tokens"]["quantiles"]["min"] == 0
    buckets = stats["by_length"]
    assert [b["n"] for b in buckets] == [5, 5, 4, 4] and sum(b["n"] for b in buckets) == 18
    assert buckets[0]["low"] == 10 and buckets[-1]["high"] == 500
    assert buckets[-1]["accuracy"] < buckets[0]["accuracy"]  # the longest quartile holds the cut-off rollouts


def test_a_model_that_does_not_think_gets_no_reasoning_block(make_rollout, metrics_of) -> None:
    rows = [
        make_rollout(prompt_id=f"p{i}", reasoning_tokens=0, answer_tokens=5, ended_in_reasoning=False) for i in range(3)
    ]
    bench = metrics_of(rows)["benchmarks"]["gsm8k"]
    assert bench["reasoning"] is None
    assert bench["distributions"]["reasoning_tokens"] is None and bench["distributions"]["answer_tokens"] is None


def test_a_schema_2_file_without_the_reasoning_columns_analyses(make_rollout, tmp_path: Path, local_store) -> None:
    table = to_table([make_rollout(prompt_id=f"p{i}", success=True, reward=1.0) for i in range(3)])
    old = table.drop_columns(["reasoning", "reasoning_tokens", "answer_tokens", "ended_in_reasoning"])
    path = tmp_path / "v2.parquet"
    pq.write_table(old.replace_schema_metadata({SCHEMA_VERSION_KEY: b"2"}), path)
    metrics = compute_metrics([str(path)], local_store)
    assert metrics.benchmarks["gsm8k"].successes == 3 and metrics.benchmarks["gsm8k"].reasoning is None
