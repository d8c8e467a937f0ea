"""compare(): the accuracy delta's CI is clustered by prompt, from each run's real metrics (compute_metrics): paired
where the runs share their prompts, independent where they share none."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from core.metrics_doc import RunMetrics
from core.store import Store
from tasks.analysis.compare import compare, rate_delta
from tasks.analysis.metrics import compute_metrics
from tasks.analysis.stats import Z_95

# 10 prompts x 50 repeats. The baseline's successes per prompt (rates 0.06 ... 0.94, 250 of 500 = 50%).
BASELINE = [3, 8, 12, 18, 22, 28, 32, 38, 42, 47]
# Same model, prompts moved both ways (+6 +4 +3 +5 -8 -9 -10 -11 -12 -8) by prompt-level noise (e.g. a
# numerics change): 210 of 500 = 42%. The shifts do not average out over repeats: a prompt's 50
# repeats share its shift.
NOISY = [9, 12, 15, 23, 14, 19, 22, 27, 30, 39]
# A real regression: 45 of 500 = 9%, every prompt down.
DROPPED = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
REPEATS = 50


@pytest.fixture
def run_metrics(
    make_rollout: Callable[..., dict[str, Any]], write_batch: Callable[..., str], local_store: Store
) -> Callable[[str, Sequence[int]], RunMetrics]:
    """A run's real metrics from rollouts with the given successes per prompt (the first s repeats succeed)."""

    def run(run_id: str, successes: Sequence[int], prefix: str = "p") -> RunMetrics:
        rows = [
            make_rollout(prompt_id=f"{prefix}{i}", repeat=r, success=r < s, reward=float(r < s), run_id=run_id)
            for i, s in enumerate(successes)
            for r in range(REPEATS)
        ]
        return compute_metrics([write_batch(rows, name=f"{run_id}.parquet")], local_store)

    return run


def hand_se(successes: Sequence[int]) -> float:
    """Clustered SE by hand: sqrt(sum_i (s_i - n_i * mean)^2) / N."""
    total = REPEATS * len(successes)
    mean = sum(successes) / total
    return math.sqrt(sum((s - REPEATS * mean) ** 2 for s in successes)) / total


def test_prompt_level_noise_is_not_a_regression(run_metrics: Callable[..., RunMetrics]) -> None:
    """Independent runs (no prompt in common: the baseline asked other prompts of equal difficulty)."""
    base, cur = run_metrics("base", BASELINE, "q"), run_metrics("cur", NOISY)
    # Each run's SE comes from the real analysis and equals the hand computation:
    # deviations from 25 are -22 -17 -13 -7 -3 3 7 13 17 22 (squares sum to 2000); from 21 they are
    # -12 -9 -6 2 -7 -2 1 6 9 18 (760).
    assert base.benchmarks["gsm8k"].ci.accuracy.se == pytest.approx(math.sqrt(2000) / 500) == hand_se(BASELINE)
    assert cur.benchmarks["gsm8k"].ci.accuracy.se == pytest.approx(math.sqrt(760) / 500) == hand_se(NOISY)
    # The old rule (Newcombe over 500 "independent" rollouts a side) calls the -8 points a regression:
    delta, _, old_high = rate_delta(0.42, 500, 0.50, 500)
    assert delta == pytest.approx(-0.08) and old_high == pytest.approx(-0.018, abs=5e-4) and old_high < 0
    # Clustered: -0.08 +/- 1.96 * sqrt(0.08944^2 + 0.05514^2) = -0.08 +/- 0.2059.
    result = compare(cur, base)
    acc = result.benchmarks["gsm8k"]["accuracy"]
    half = Z_95 * math.hypot(math.sqrt(760) / 500, math.sqrt(2000) / 500)
    assert half == pytest.approx(0.2059, abs=1e-4)
    assert acc.delta == pytest.approx(-0.08)
    assert (acc.low, acc.high) == pytest.approx((-0.08 - half, -0.08 + half))
    assert acc.regression is False and acc.improvement is False and result.regressions == []
    assert acc.method == "clustered-prompts" and acc.n_current == acc.n_baseline == 10
    assert result.pairing == {}


def test_the_same_prompts_are_paired_and_the_interval_narrows(run_metrics: Callable[..., RunMetrics]) -> None:
    """The same 10 prompts in both runs: per prompt the successes moved by d_i = +6 +4 +3 +5 -8 -9 -10 -11 -12 -8, so
    u_i = (d_i + 50 x 0.08) / 500 = (10 8 7 9 -4 -5 -6 -7 -8 -4) / 500, whose squares sum to 500 / 500^2:
    SE = sqrt(500) / 500 = 0.0447, a CI of -0.08 +/- 0.0877 against the independent +/- 0.2059."""
    base, cur = run_metrics("base", BASELINE), run_metrics("cur", NOISY)
    result = compare(cur, base)
    acc = result.benchmarks["gsm8k"]["accuracy"]
    assert acc.method == "paired-clustered" and acc.n_current == acc.n_baseline == 10
    assert acc.se == pytest.approx(math.sqrt(500) / 500)
    assert (acc.low, acc.high) == pytest.approx((-0.08 - Z_95 * acc.se, -0.08 + Z_95 * acc.se))
    assert acc.high == pytest.approx(0.0077, abs=1e-4) and acc.regression is False
    assert acc.detectable == pytest.approx((Z_95 + 0.8416212335729143) * math.sqrt(500) / 500)
    # pass@1 is the mean of per-prompt rates: with equal repeats the same numbers, paired the same way
    pass1 = result.benchmarks["gsm8k"]["pass@1"]
    assert pass1.method == "paired-clustered" and pass1.delta == pytest.approx(-0.08)
    assert pass1.se == pytest.approx(acc.se)
    pairing = result.pairing["gsm8k"]
    assert (pairing.shared, pairing.only_current, pairing.only_baseline, pairing.changed) == (10, 0, 0, 0)
    # majority flips: p5 (28 -> 19 of 50) and p6 (32 -> 22) went right to wrong, the larger change first; p4 (22 ->
    # 14) was wrong in both, p7 (38 -> 27) right in both
    assert [f.prompt_id for f in pairing.lost] == ["p6", "p5"] and pairing.gained == []
    assert pairing.lost_count == 2 and pairing.lost[0].baseline == 0.64 and pairing.lost[0].current == 0.44


def test_a_large_drop_is_still_a_regression(run_metrics: Callable[..., RunMetrics]) -> None:
    base, cur = run_metrics("base", BASELINE, "q"), run_metrics("cur", DROPPED)
    # SE of the dropped run: deviations from 4.5 are -4.5 ... 4.5 (squares sum to 82.5).
    assert cur.benchmarks["gsm8k"].ci.accuracy.se == pytest.approx(math.sqrt(82.5) / 500)
    acc = compare(cur, base).benchmarks["gsm8k"]["accuracy"]
    half = Z_95 * math.hypot(math.sqrt(82.5) / 500, math.sqrt(2000) / 500)
    assert acc.delta == pytest.approx(-0.41)
    assert acc.high == pytest.approx(-0.41 + half) == pytest.approx(-0.2311, abs=1e-4)
    assert acc.regression is True
    # Swapped, the same interval mirrored is an improvement.
    assert compare(base, cur).benchmarks["gsm8k"]["accuracy"].improvement is True


def as_schema_3(metrics: RunMetrics, keep_per_prompt: bool) -> RunMetrics:
    """The document as schema_version 3 wrote it: ci.accuracy a Wilson interval over rollouts, no SE."""
    doc: dict[str, Any] = metrics.model_dump(mode="json")
    doc["schema_version"] = 3
    for bm in doc["benchmarks"].values():
        ci = bm["ci"]["accuracy"]
        bm["ci"]["accuracy"] = {"low": ci["low"], "high": ci["high"], "n": bm["n_rollouts"], "method": "wilson"}
        if not keep_per_prompt:
            bm["per_prompt"] = []
    return RunMetrics.model_validate(doc)


def test_a_schema_3_baseline_gets_its_se_from_per_prompt(run_metrics: Callable[..., RunMetrics]) -> None:
    base, cur = run_metrics("base", BASELINE, "q"), run_metrics("cur", NOISY)
    acc = compare(cur, as_schema_3(base, keep_per_prompt=True)).benchmarks["gsm8k"]["accuracy"]
    expected = compare(cur, base).benchmarks["gsm8k"]["accuracy"]
    assert (acc.low, acc.high) == pytest.approx((expected.low, expected.high))
    assert acc.regression is False and acc.n_baseline == 10
    assert acc.method == "clustered-prompts (baseline: SE recomputed from per_prompt, schema_version <= 3)"


def test_a_baseline_without_se_or_per_prompt_falls_back_to_newcombe(run_metrics: Callable[..., RunMetrics]) -> None:
    base, cur = run_metrics("base", BASELINE), run_metrics("cur", NOISY)  # no per-prompt rows: nothing to pair
    acc = compare(cur, as_schema_3(base, keep_per_prompt=False)).benchmarks["gsm8k"]["accuracy"]
    assert (acc.delta, acc.low, acc.high) == pytest.approx(rate_delta(0.42, 500, 0.50, 500))
    assert acc.regression is True and acc.n_current == acc.n_baseline == 500  # today's rule, said so:
    assert acc.method == "newcombe-rollouts (the baseline has neither a clustered SE nor per-prompt rows)"


def test_a_run_whose_prompts_all_scored_the_same_is_not_counted_as_exact(
    run_metrics: Callable[..., RunMetrics],
) -> None:
    """Independent runs, the current one right on every repeat of its 10 prompts (clustered SE 0): the delta's
    interval is Newcombe's over prompts, not the baseline's SE alone as if 100% were known exactly."""
    cur, base = run_metrics("cur", [REPEATS] * 10), run_metrics("base", [48, 46, 47, 49, 45, 48, 47, 46, 49, 45], "q")
    assert cur.benchmarks["gsm8k"].ci.accuracy.se == 0.0
    acc = compare(cur, base).benchmarks["gsm8k"]["accuracy"]
    assert (acc.delta, acc.low, acc.high) == pytest.approx(rate_delta(1.0, 10, 0.94, 10))
    assert acc.low is not None and acc.low < 0 < acc.high  # not "significant" on 10 prompts
    assert acc.method == "newcombe-prompts (the current run scored the same on every prompt: clustered SE 0)"
    assert acc.n_current == acc.n_baseline == 10
    clustered_only_base = Z_95 * hand_se([48, 46, 47, 49, 45, 48, 47, 46, 49, 45])
    assert acc.high - acc.delta > clustered_only_base  # wider than the SE-0 arithmetic would give


def test_one_prompt_gives_no_interval(run_metrics: Callable[..., RunMetrics]) -> None:
    """One prompt shows no spread between prompts (its SE is 0): no interval, never flagged, where
    Newcombe over its 50 repeats would flag 10% against 90%."""
    acc = compare(run_metrics("cur", [5]), run_metrics("base", [45], "q")).benchmarks["gsm8k"]["accuracy"]
    assert acc.delta == pytest.approx(-0.8) and acc.low is None and acc.high is None
    assert acc.regression is False and acc.method == "clustered-prompts (fewer than 2 prompts: no interval)"
    assert rate_delta(0.1, 50, 0.9, 50)[2] < 0


def test_an_environments_headline_rate_is_paired_from_its_per_prompt_counts(
    make_rollout: Callable[..., dict[str, Any]], write_batch: Callable[..., str], local_store: Store
) -> None:
    """GSM8K-like: `strict` is a headline rate. Per prompt its (trues, n) is in per_prompt[].rates, errored rollouts
    counted as false as in the rate itself, and the comparison pairs it like accuracy."""
    from envs.base import MetricSpec

    specs = {"gsm8k": [MetricSpec(key="strict", label="strict", kind="rate", headline=True)]}

    def run(run_id: str, trues: Sequence[int]) -> RunMetrics:
        rows = [
            make_rollout(
                prompt_id=f"p{i}", repeat=r, run_id=run_id, info={"strict": r < t},
                error="Timeout: x" if (i, r) == (0, 0) else None,  # an errored rollout: false, and counted
            )
            for i, t in enumerate(trues)
            for r in range(4)
        ]  # fmt: skip
        return compute_metrics([write_batch(rows, name=f"{run_id}.parquet")], local_store, specs)

    base, cur = run("base", [4, 3, 2, 1, 0, 4]), run("cur", [3, 3, 1, 1, 0, 2])
    rows = {p.prompt_id: p.rates for p in cur.benchmarks["gsm8k"].per_prompt}
    assert rows["p0"] == {"strict": (2, 4)}  # 3 true, one of them errored: 2 of 4
    assert rows["p5"] == {"strict": (2, 4)}
    row = compare(cur, base).benchmarks["gsm8k"]["strict"]
    assert row.method == "paired-clustered" and row.n_current == row.n_baseline == 6
    assert row.baseline == pytest.approx(13 / 24) and row.current == pytest.approx(9 / 24)
    assert row.current == pytest.approx(cur.benchmarks["gsm8k"].env_metric("strict").value)
    # per prompt d_i = (2-3, 3-3, 1-2, 1-1, 0-0, 2-4) / 4 around the mean -4/24: u_i = (d_i * 4 + 4/6) / 24
    u = [(d + 4 / 6) / 24 for d in (-1, 0, -1, 0, 0, -2)]
    assert row.se == pytest.approx(math.sqrt(sum(x * x for x in u)))
