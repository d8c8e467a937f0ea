"""compute_metrics against small hand-computed rollout sets."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from core.metrics_doc import METRICS_SCHEMA_VERSION, RunMetrics
from core.schema import to_json
from tasks.analysis import queries
from tasks.analysis.metrics import compute_metrics
from tasks.analysis.stats import wilson_interval

Rows = list[dict[str, Any]]


def prompt_rows(make_rollout: Callable[..., dict], prompt_id: str, outcomes: list[bool], **kw: Any) -> Rows:
    """One prompt's repeats with the given successes (reward 1/0)."""
    return [
        make_rollout(
            prompt_id=prompt_id,
            repeat=i,
            success=ok,
            reward=float(ok),
            parsed_answer="2" if ok else "3",
            **kw,
        )
        for i, ok in enumerate(outcomes)
    ]


# ---------------------------------------------------------------------------------------------
# pass@k and maj@k


def test_pass_at_k_over_prompts(make_rollout, metrics_of) -> None:
    rows = (
        prompt_rows(make_rollout, "one", [False, True, False, False])
        + prompt_rows(make_rollout, "none", [False] * 4)
        + prompt_rows(make_rollout, "all", [True] * 4)
    )
    bm = metrics_of(rows)["benchmarks"]["gsm8k"]
    assert bm["pass_at_k"] == pytest.approx({"1": 1.25 / 3, "2": 1.5 / 3, "4": 2.0 / 3})
    assert bm["accuracy"] == pytest.approx(5 / 12)
    assert bm["successes"] == 5
    assert bm["n_prompts"] == 3 and bm["n_rollouts"] == 12
    assert bm["repeats"] == {"min": 4, "max": 4}
    per_prompt = {p["prompt_id"]: p for p in bm["per_prompt"]}
    assert [p["prompt_id"] for p in bm["per_prompt"]] == ["all", "none", "one"]
    assert per_prompt["one"] == {
        "prompt_id": "one",
        "n": 4,
        "successes": 1,
        "success_rate": 0.25,
        "mean_reward": 0.25,
        "reference": "2",
        "top_answer": "3",
        # the opening messages as stored (JSON text), hashed: what a paired comparison matches prompts by
        "prompt_hash": hashlib.md5(to_json(rows[0]["messages"]).encode()).hexdigest()[:16],
        "rates": {},  # no environment rate declared here
    }


def test_prompts_with_fewer_repeats_than_k_are_excluded(make_rollout, metrics_of) -> None:
    rows = prompt_rows(make_rollout, "four", [True, False, False, False]) + prompt_rows(
        make_rollout, "two", [True, True]
    )
    bm = metrics_of(rows)["benchmarks"]["gsm8k"]
    assert bm["repeats"] == {"min": 2, "max": 4}
    assert bm["pass_at_k"] == pytest.approx({"1": (0.25 + 1) / 2, "2": (0.5 + 1) / 2, "4": 1.0})
    # maj@2: "four" ties 2/3 and keeps "2", the first seen; maj@4 sees only "four" ("3" x3: wrong).
    assert bm["maj_at_k"] == pytest.approx({"1": 1.0, "2": 1.0, "4": 0.0})


def test_maj_at_k_votes_ties_and_null_answers(make_rollout, metrics_of) -> None:
    def answers(prompt_id: str, reference: str, parsed: list[str | None]) -> Rows:
        return [
            make_rollout(
                prompt_id=prompt_id,
                repeat=i,
                parsed_answer=a,
                reference=reference,
                success=a == reference,
                reward=float(a == reference),
            )
            for i, a in enumerate(parsed)
        ]

    rows = (
        answers("p1", "A", ["B", "A", "A", "B"])  # ties at k=2 and k=4 go to B (first seen): wrong
        + answers("p2", "A", ["A", "B", "B", "A"])  # ties go to A: right
        + answers("p3", "7", [None, "3", "7", "7"])  # null doesn't vote: k=1 no answer, k=2 "3", k=4 "7"
    )
    bm = metrics_of(list(reversed(rows)))["benchmarks"]["gsm8k"]  # file order must not matter
    assert bm["maj_at_k"] == pytest.approx({"1": 1 / 3, "2": 1 / 3, "4": 2 / 3})
    assert {p["prompt_id"]: p["top_answer"] for p in bm["per_prompt"]} == {"p1": "B", "p2": "A", "p3": "7"}


def test_maj_at_k_accepts_answers_the_env_judged_equivalent(make_rollout, metrics_of) -> None:
    rows = [make_rollout(prompt_id="q", repeat=i, parsed_answer="0.5", reference="1/2", success=True) for i in range(2)]
    rows.append(make_rollout(prompt_id="q", repeat=2, parsed_answer=" 1/2 ", reference="1/2", success=False))
    bm = metrics_of(rows)["benchmarks"]["gsm8k"]
    assert bm["maj_at_k"] == pytest.approx({"1": 1.0, "2": 1.0, "3": 1.0})


# ---------------------------------------------------------------------------------------------
# Rewards, rates, counts


def test_reward_stats_treat_errors_as_zero(make_rollout, metrics_of) -> None:
    rewards = [1.0, 0.0, 0.5, 2.0]
    rows = [make_rollout(prompt_id="p", repeat=i, reward=r) for i, r in enumerate(rewards)]
    rows.append(make_rollout(prompt_id="p", repeat=4, reward=5.0, success=True, error="boom"))
    bm = metrics_of(rows)["benchmarks"]["gsm8k"]
    effective = [*rewards, 0.0]
    mean = sum(effective) / 5
    std = math.sqrt(sum((x - mean) ** 2 for x in effective) / 5)
    assert bm["reward"] == pytest.approx(
        {"min": 0.0, "max": 2.0, "mean": mean, "median": 0.5, "std": std, "mode": 0.0, "mode_share": 0.4}
    )
    assert bm["mean_reward"] == pytest.approx(mean)
    assert bm["accuracy"] == pytest.approx(0.8)  # the errored rollout's success=True does not count


def test_reward_mode_rounds_float_sums(make_rollout, metrics_of) -> None:
    nine_steps = sum([-0.1] * 9)  # -0.8999999999999999
    rows = [make_rollout(prompt_id=f"g{i}", reward=r) for i, r in enumerate([nine_steps, -0.9, -0.3, 19.2])]
    bm = metrics_of(rows)["benchmarks"]["gsm8k"]
    assert bm["reward"]["mode"] == pytest.approx(-0.9)
    assert bm["reward"]["mode_share"] == pytest.approx(0.5)


def test_parse_errors_errors_and_finish_reasons(make_rollout, metrics_of) -> None:
    rows = [
        make_rollout(prompt_id="a", finish_reason="stop"),
        make_rollout(prompt_id="b", finish_reason="stop"),
        make_rollout(prompt_id="c", finish_reason="length", parsed_answer=None, success=False, reward=0.0),
        make_rollout(
            prompt_id="d",
            finish_reason=None,
            completion=None,
            parsed_answer=None,
            success=False,
            reward=0.0,
            error="ReadTimeout: the server took longer than 30 s\ntraceback...",
        ),
        make_rollout(prompt_id="e", finish_reason="stop", parsed_answer=None, error="ReadTimeout: again"),
        make_rollout(prompt_id="f", finish_reason="stop", error="server returned 500"),
    ]
    bm = metrics_of(rows)["benchmarks"]["gsm8k"]
    assert bm["parse_error_rate"] == pytest.approx(1 / 6)  # only "c": errors are not parse errors
    assert bm["error_count"] == 3
    assert bm["error_rate"] == pytest.approx(0.5)
    assert bm["errors"] == {"ReadTimeout": 2, "server returned 500": 1}
    assert bm["finish_reasons"] == {"stop": 4, "length": 1, "none": 1}
    assert bm["accuracy"] == pytest.approx(2 / 6)


def test_tokens_latency_and_tool_calls(make_rollout, metrics_of) -> None:
    rows = [
        make_rollout(
            prompt_id=f"p{i}",
            prompt_tokens=10 * (i + 1),
            completion_tokens=100 * (i + 1),
            latency_s=float(i + 1),
            tool_calls=i,
            reward=float(10 - i),
        )
        for i in range(10)
    ]
    rows.append(make_rollout(prompt_id="err", prompt_tokens=None, completion_tokens=None, latency_s=None, error="x"))
    bm = metrics_of(rows)["benchmarks"]["gsm8k"]
    assert bm["tokens"] == pytest.approx(
        {"prompt_mean": 55.0, "prompt_total": 550, "completion_mean": 550.0, "completion_total": 5500}
    )
    assert bm["latency_s"] == pytest.approx({"p50": 5.5, "p90": 9.1, "p99": 9.91, "mean": 5.5, "max": 10.0})
    tools = bm["tool_calls"]
    assert (tools["min"], tools["max"], tools["total"]) == (0, 9, 45)
    assert tools["mean"] == pytest.approx(45 / 11)
    assert -1.0 < tools["reward_corr"] < 0.0
    by_count = {r["tool_calls"]: r for r in bm["reward_by_tool_calls"]}
    assert by_count[0]["n"] == 2 and by_count[0]["mean_reward"] == pytest.approx(5.0)
    assert by_count[9]["mean_reward"] == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------
# Shapes of runs


def test_empty_file_list_and_zero_rows(write_batch, local_store) -> None:
    expected = {
        "schema_version": METRICS_SCHEMA_VERSION,
        "total_rollouts": 0,
        "duplicate_rollouts": 0,
        "benchmarks": {},
    }
    assert compute_metrics([], local_store).model_dump(mode="json") == expected
    assert compute_metrics([write_batch([])], local_store).model_dump(mode="json") == expected


def test_all_error_benchmark(make_rollout, metrics_of) -> None:
    rows = [
        make_rollout(
            prompt_id=f"p{i // 2}",
            repeat=i % 2,
            error="ConnectError: refused",
            completion=None,
            parsed_answer=None,
            finish_reason=None,
            prompt_tokens=None,
            completion_tokens=None,
            latency_s=None,
        )
        for i in range(4)
    ]
    bm = metrics_of(rows)["benchmarks"]["gsm8k"]
    assert bm["accuracy"] == 0.0 and bm["mean_reward"] == 0.0
    assert bm["pass_at_k"] == {"1": 0.0, "2": 0.0}
    assert bm["maj_at_k"] == {"1": 0.0, "2": 0.0}
    assert bm["error_rate"] == 1.0 and bm["parse_error_rate"] == 0.0
    assert bm["errors"] == {"ConnectError": 4}
    assert bm["latency_s"] == {"p50": None, "p90": None, "p99": None, "mean": None, "max": None}
    assert bm["tokens"]["prompt_total"] == 0 and bm["tokens"]["prompt_mean"] is None
    assert bm["tool_calls"]["reward_corr"] is None


def test_two_benchmarks_across_files(make_rollout, write_batch, local_store) -> None:
    gsm = write_batch(prompt_rows(make_rollout, "g", [True, False]))
    tetris = write_batch(
        [make_rollout(benchmark="tetris", prompt_id=f"game-{i}", reward=-0.9, success=False) for i in range(3)]
    )
    metrics = compute_metrics([gsm, tetris], local_store)
    assert isinstance(metrics, RunMetrics)
    assert metrics.total_rollouts == 5
    assert sorted(metrics.benchmarks) == ["gsm8k", "tetris"]
    assert metrics.benchmarks["gsm8k"].accuracy == 0.5
    assert metrics.benchmarks["tetris"].n_prompts == 3


def test_duplicate_rollouts_count_once(make_rollout, write_batch, local_store) -> None:
    old = prompt_rows(make_rollout, "p", [False, False])
    new = prompt_rows(make_rollout, "p", [True, True], created_at=datetime(2025, 2, 1, tzinfo=UTC))
    metrics = compute_metrics([write_batch(old), write_batch(new)], local_store)
    assert metrics.total_rollouts == 2 and metrics.duplicate_rollouts == 2
    assert metrics.benchmarks["gsm8k"].accuracy == 1.0  # the newest copy wins


# ---------------------------------------------------------------------------------------------
# Confidence intervals


def test_metrics_carry_confidence_intervals(make_rollout, metrics_of) -> None:
    rows = []
    for p in range(10):
        rows += prompt_rows(make_rollout, f"p{p}", [p < 8] * 3 + [p < 4])  # 8 prompts x3 + 4 prompts x1 ok
    bm = metrics_of(rows)["benchmarks"]["gsm8k"]
    ci = bm["ci"]
    assert ci["level"] == 0.95
    assert bm["accuracy"] == pytest.approx(28 / 40)
    # clustered by prompt (tests/tasks/test_analysis_ci.py has the hand computation): wider than Wilson
    assert ci["accuracy"]["method"] == "clustered-prompts" and ci["accuracy"]["n"] == 10
    assert ci["accuracy"]["low"] < wilson_interval(28 / 40, 40)[0]
    assert ci["pass_at_k"]["1"]["n"] == 10  # over prompts
    low, high = wilson_interval(bm["pass_at_k"]["4"], 10)
    assert (ci["pass_at_k"]["4"]["low"], ci["pass_at_k"]["4"]["high"]) == pytest.approx((low, high))
    assert set(ci["maj_at_k"]) == {"1", "2", "4"}
    assert ci["error_rate"]["low"] == 0.0 and ci["parse_error_rate"]["n"] == 40
    reward = ci["mean_reward"]
    assert reward["method"] == "bootstrap-prompts" and reward["n"] == 10 and reward["resamples"] == 2000
    assert reward["low"] < bm["mean_reward"] < reward["high"]


def test_ci_for_prompts_with_fewer_repeats_than_k(make_rollout, metrics_of) -> None:
    rows = prompt_rows(make_rollout, "four", [True, False, False, False]) + prompt_rows(make_rollout, "one", [True])
    bm = metrics_of(rows)["benchmarks"]["gsm8k"]
    assert bm["pass_at_k"] == pytest.approx({"1": (0.25 + 1) / 2, "2": 0.5, "4": 1.0})
    assert {k: v["n"] for k, v in bm["ci"]["pass_at_k"].items()} == {"1": 2, "2": 1, "4": 1}
    assert {k: v["n"] for k, v in bm["ci"]["maj_at_k"].items()} == {"1": 2, "2": 1, "4": 1}


def test_metrics_are_deterministic(make_rollout, write_batch, local_store) -> None:
    rows = [make_rollout(prompt_id=f"p{i % 7}", repeat=i // 7, reward=float(i % 3)) for i in range(35)]
    files = [write_batch(rows)]
    assert compute_metrics(files, local_store) == compute_metrics(files, local_store)


# ---------------------------------------------------------------------------------------------
# Distributions and per-prompt breakdowns


def test_prompt_outcomes_list_never_and_always_solved(make_rollout, metrics_of) -> None:
    rows = (
        prompt_rows(make_rollout, "none-a", [False, False])
        + prompt_rows(make_rollout, "none-b", [False, False])
        + prompt_rows(make_rollout, "all", [True, True])
        + prompt_rows(make_rollout, "some", [True, False])
    )
    rows.append(make_rollout(prompt_id="errored", success=True, error="boom"))  # an error is a failure
    outcomes = metrics_of(rows)["benchmarks"]["gsm8k"]["prompt_outcomes"]
    assert outcomes == {
        "never_succeed": {"count": 3, "ids": ["errored", "none-a", "none-b"]},
        "always_succeed": {"count": 1, "ids": ["all"]},
        "mixed": {"count": 1},
    }


def test_reward_values_round_and_count(make_rollout, metrics_of, monkeypatch) -> None:
    nine_steps = sum([-0.1] * 9)
    rewards = [nine_steps, -0.9, -0.9, 19.2, 0.5, 0.5, 0.5]
    rows = [make_rollout(prompt_id=f"g{i}", reward=r) for i, r in enumerate(rewards)]
    bm = metrics_of(rows)["benchmarks"]["gsm8k"]
    assert bm["reward_values"] == {"distinct": 3, "truncated": False, "values": [[-0.9, 3], [0.5, 3], [19.2, 1]]}
    assert bm["reward"]["mode"] == -0.9 and bm["reward"]["mode_share"] == pytest.approx(3 / 7)  # tie: lowest value
    monkeypatch.setattr(queries, "MAX_REWARD_VALUES", 2)
    capped = metrics_of(rows)["benchmarks"]["gsm8k"]["reward_values"]
    assert capped == {"distinct": 3, "truncated": True, "values": [[-0.9, 3], [0.5, 3]]}


def test_distributions_quantiles_and_histograms(make_rollout, metrics_of) -> None:
    rows = [
        make_rollout(prompt_id=f"p{i}", completion_tokens=i, prompt_tokens=50, latency_s=i / 10, reward=float(i % 2))
        for i in range(1, 101)
    ]
    rows.append(make_rollout(prompt_id="err", prompt_tokens=None, completion_tokens=None, latency_s=None, error="x"))
    dist = metrics_of(rows)["benchmarks"]["gsm8k"]["distributions"]
    completion = dist["completion_tokens"]
    assert completion["count"] == 100 and completion["mean"] == pytest.approx(50.5)
    q = completion["quantiles"]
    assert (q["min"], q["p50"], q["max"]) == (1.0, 50.5, 100.0)
    assert q["p5"] == pytest.approx(5.95) and q["p95"] == pytest.approx(95.05)
    hist = completion["histogram"]
    assert sum(hist["counts"]) == 100 and len(hist["edges"]) == len(hist["counts"]) + 1
    widths = {b - a for a, b in zip(hist["edges"], hist["edges"][1:], strict=False)}
    assert widths == {4.0}  # integer-wide bins: ceil(100 / 30)
    assert dist["prompt_tokens"]["histogram"] == {"edges": [50.0, 51.0], "counts": [100]}
    latency = dist["latency_s"]["histogram"]
    assert len(latency["counts"]) == queries.HISTOGRAM_BINS and sum(latency["counts"]) == 100
    reward = dist["reward"]
    assert reward["count"] == 101 and reward["histogram"]["counts"][0] == 51 and reward["histogram"]["counts"][-1] == 50


def test_all_error_run_has_sane_intervals_and_distributions(make_rollout, metrics_of) -> None:
    rows = [
        make_rollout(prompt_id=f"p{i}", error="ConnectError: refused", completion_tokens=None, latency_s=None)
        for i in range(3)
    ]
    bm = metrics_of(rows)["benchmarks"]["gsm8k"]
    assert bm["ci"]["accuracy"]["low"] == 0.0 and bm["ci"]["error_rate"]["high"] == 1.0
    assert bm["ci"]["mean_reward"]["low"] == 0.0 and bm["ci"]["mean_reward"]["high"] == 0.0
    assert bm["distributions"]["latency_s"] is None and bm["distributions"]["completion_tokens"] is None
    assert bm["distributions"]["reward"]["histogram"] == {"edges": [0.0, 1.0], "counts": [3]}
    assert bm["prompt_outcomes"]["never_succeed"]["count"] == 3
