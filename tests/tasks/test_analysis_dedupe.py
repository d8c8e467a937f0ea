"""Stale duplicate repeats in a run folder: every per-prompt metric sees each repeat once, the newest copy."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from envs.base import MetricSpec
from tasks.analysis.metrics import compute_metrics
from tasks.reporting.browser_sample import sample_rollouts

NEW = datetime(2025, 2, 1, tzinfo=UTC)
OLD = datetime(2025, 1, 1, tzinfo=UTC)


def answer_rows(make_rollout: Callable[..., dict], prompt_id: str, answers: list[str], **kw: Any) -> list[dict]:
    """Repeats 0.. of a prompt whose reference is "2", with these parsed answers."""
    return [
        make_rollout(
            prompt_id=prompt_id,
            repeat=i,
            parsed_answer=a,
            success=a == "2",
            reward=float(a == "2"),
            info={"strict": a == "2"},
            **kw,
        )
        for i, a in enumerate(answers)
    ]


def test_stale_duplicate_does_not_shift_maj_at_k_votes(make_rollout, write_batch, local_store) -> None:
    # Repeats vote 2, 3, 3, 2: maj@4 is a 2-2 tie that goes to "2" (seen first), so it is right;
    # maj@2 ties 1-1 and keeps "2"; maj@1 is repeat 0's "2". The stale copy of repeat 0 ("3", older)
    # used to take position 2, pushing repeat 3 to position 5: only 3 repeats voted and "3" won maj@4.
    current = write_batch(answer_rows(make_rollout, "p", ["2", "3", "3", "2"], created_at=NEW))
    stale = write_batch(answer_rows(make_rollout, "p", ["3"], created_at=OLD))
    specs = {"gsm8k": [MetricSpec(key="strict", label="Strict", kind="rate")]}
    for files in ([current, stale], [stale, current]):  # file order must not matter
        metrics = compute_metrics(files, local_store, specs)
        assert metrics.duplicate_rollouts == 1 and metrics.total_rollouts == 4
        bm = metrics.benchmarks["gsm8k"]
        assert bm.maj_at_k == pytest.approx({"1": 1.0, "2": 1.0, "4": 1.0})
        assert bm.ci.maj_at_k["4"].n == 1
        # pass@k, accuracy, the per-prompt row and env rates count the 4 kept repeats (2 right).
        assert bm.pass_at_k == pytest.approx({"1": 0.5, "2": 1 - 1 / 6, "4": 1.0})
        assert (bm.n_rollouts, bm.successes, bm.accuracy, bm.repeats) == (4, 2, 0.5, {"min": 4, "max": 4})
        (row,) = bm.per_prompt
        assert (row.n, row.successes, row.top_answer) == (4, 2, "2")
        (strict,) = bm.env_metrics
        assert (strict.value, strict.n) == (0.5, 4)
        assert [tuple(v) for v in bm.reward_values.values] == [(0.0, 2), (1.0, 2)]


def test_stale_duplicates_of_every_repeat_leave_the_newest_run(make_rollout, write_batch, local_store) -> None:
    # A whole older batch (all wrong) beside its rerun (3 of 4 right): metrics equal the rerun's alone.
    rerun = write_batch(answer_rows(make_rollout, "p", ["3", "2", "2", "2"], created_at=NEW))
    older = write_batch(answer_rows(make_rollout, "p", ["5", "5", "5", "5"], created_at=OLD))
    alone = compute_metrics([rerun], local_store).model_dump()
    both = compute_metrics([older, rerun], local_store).model_dump()
    assert both.pop("duplicate_rollouts") == 4 and alone.pop("duplicate_rollouts") == 0
    assert both == alone
    # maj@2 ties "3" and "2" and keeps "3", seen first.
    assert alone["benchmarks"]["gsm8k"]["maj_at_k"] == pytest.approx({"1": 0.0, "2": 0.0, "4": 1.0})


def test_equal_timestamps_keep_the_same_copy_as_the_browser(make_rollout, write_batch, local_store) -> None:
    # Same created_at in both files: the metrics (tasks/analysis/load.py) and the rollout browser's sample
    # (tasks/reporting/browser_sample.py) both keep the last file name's copy.
    first = write_batch(answer_rows(make_rollout, "p", ["3"], created_at=NEW), name="a.parquet")
    last = write_batch(answer_rows(make_rollout, "p", ["2"], created_at=NEW), name="b.parquet")
    for files in ([first, last], [last, first]):
        metrics = compute_metrics(files, local_store)
        assert metrics.duplicate_rollouts == 1 and metrics.benchmarks["gsm8k"].accuracy == 1.0
        assert metrics.benchmarks["gsm8k"].per_prompt[0].top_answer == "2"
        assert sample_rollouts(files, local_store, ["parsed_answer"], n=10)["parsed_answer"].to_list() == ["2"]
