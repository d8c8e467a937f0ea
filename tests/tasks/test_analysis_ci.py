"""Intervals that respect repeats of a prompt, lm-eval's stderr, the tool-call CIs, and maj@k only where declared."""

from __future__ import annotations

import math

import numpy as np
import pytest

from envs.registry import metric_specs
from tasks.analysis.metrics import compute_metrics, majority_votes
from tasks.analysis.stats import bootstrap_corr_ci, wilson_interval
from tasks.reporting.headline import headline_table
from tasks.reporting.tables import benchmark_sections


def _prompt(make_rollout, pid: str, oks: list[int], **extra) -> list[dict]:
    return [
        make_rollout(prompt_id=pid, repeat=r, success=bool(ok), reward=float(ok), parsed_answer=str(ok), **extra)
        for r, ok in enumerate(oks)
    ]


def test_accuracy_ci_clustered_by_prompt_equals_hand_computation(make_rollout, metrics_of) -> None:
    # 3 prompts x 4 repeats: 4/4, 2/4, 0/4 correct.
    rows = _prompt(make_rollout, "a", [1, 1, 1, 1]) + _prompt(make_rollout, "b", [1, 1, 0, 0])
    rows += _prompt(make_rollout, "c", [0, 0, 0, 0])
    bm = metrics_of(rows)["benchmarks"]["gsm8k"]
    # mean = 6/12 = 0.5; per-prompt residual sums: 4 - 4*0.5 = 2, 2 - 2 = 0, 0 - 2 = -2
    se = math.sqrt(2**2 + 0**2 + (-2) ** 2) / 12  # 0.2357
    ci = bm["ci"]["accuracy"]
    assert ci["se"] == pytest.approx(se)
    assert (ci["low"], ci["high"]) == pytest.approx((0.5 - 1.959963984540054 * se, 0.5 + 1.959963984540054 * se))
    assert (ci["n"], ci["rollouts"], ci["method"]) == (3, 12, "clustered-prompts")
    # lm-eval's mean_stderr: sample std (ddof=1) of the 12 scores / sqrt(12) = sqrt(12 * 0.25 / 11) / sqrt(12)
    assert bm["accuracy_stderr"] == pytest.approx(math.sqrt(12 * 0.25 / 11) / math.sqrt(12))
    # clustering widens the interval: Wilson over the 12 rollouts treats them as independent
    wilson_low, wilson_high = wilson_interval(0.5, 12)
    assert ci["low"] < wilson_low and ci["high"] > wilson_high


def test_clustered_ci_is_clipped_and_undefined_for_one_prompt(make_rollout, metrics_of) -> None:
    rows = _prompt(make_rollout, "a", [1, 1, 1, 1]) + _prompt(make_rollout, "b", [1, 1, 1, 0])
    ci = metrics_of(rows)["benchmarks"]["gsm8k"]["ci"]["accuracy"]
    assert ci["high"] == 1.0 and 0.0 < ci["low"] < 7 / 8
    one = metrics_of(_prompt(make_rollout, "a", [1, 0]))["benchmarks"]["gsm8k"]
    assert one["ci"]["accuracy"]["low"] is None and one["ci"]["accuracy"]["high"] is None
    assert one["accuracy_stderr"] == pytest.approx(math.sqrt(0.5) / math.sqrt(2))


def test_prompts_that_all_agree_get_wilsons_interval_over_the_prompts_not_zero_width(
    make_rollout, metrics_of, write_batch, local_store
) -> None:
    """0 of 48 over 12 prompts (the demo's SmolLM2 on GSM8K): the clustered SE is 0, and mean +/- 0 printed
    "0.0-0.0%". Every prompt at the same rate shows no more than one draw per prompt: Wilson over the 12."""
    for oks, rate in (([0, 0, 0, 0], 0.0), ([1, 1, 1, 1], 1.0), ([1, 0, 1, 0], 0.5)):
        rows = [r for i in range(12) for r in _prompt(make_rollout, f"p{i}", oks)]
        bm = metrics_of(rows)["benchmarks"]["gsm8k"]
        ci = bm["ci"]["accuracy"]
        assert (bm["accuracy"], ci["se"]) == (rate, pytest.approx(0.0))
        assert (ci["low"], ci["high"]) == pytest.approx(wilson_interval(rate, 12))
        assert (ci["n"], ci["rollouts"], ci["method"]) == (12, 48, "wilson-prompts")
    assert wilson_interval(0.0, 12) == (0.0, pytest.approx(0.2425, abs=1e-4))
    # as the report's headline shows it
    none_right = [r for i in range(12) for r in _prompt(make_rollout, f"p{i}", [0, 0, 0, 0])]
    table = headline_table(compute_metrics([write_batch(none_right)], local_store))
    assert table.rows[0][table.header.index("accuracy 95% CI")] == "0.0–24.2%"


def test_maj_at_k_only_where_the_environment_declares_it(make_rollout, write_batch, local_store) -> None:
    assert majority_votes(["gsm8k", "tetris", "unknown-bench"]) == {
        "gsm8k": True,
        "tetris": False,
        "unknown-bench": True,
    }
    gsm = _prompt(make_rollout, "g", [1, 0])
    game = _prompt(make_rollout, "t", [1, 0], benchmark="tetris", reference=None)
    files = [write_batch(gsm), write_batch(game)]
    metrics = compute_metrics(files, local_store)
    assert metrics.benchmarks["tetris"].maj_at_k == {} and metrics.benchmarks["tetris"].ci.maj_at_k == {}
    assert not metrics.benchmarks["tetris"].majority_vote
    assert metrics.benchmarks["gsm8k"].maj_at_k == {"1": 1.0, "2": 1.0}
    assert compute_metrics(files, local_store, votes={"tetris"}).benchmarks["gsm8k"].maj_at_k == {}
    # a run of benchmarks without majority votes has no maj@n column; a mixed run shows it, "–" for tetris
    assert "maj@n" not in headline_table(compute_metrics(files[1:], local_store)).header
    table = headline_table(metrics)
    column = table.header.index("maj@n")
    assert [row[column] for row in table.rows] == ["100.00%", "–"]
    titles = {s.title: s for s in benchmark_sections(metrics.benchmarks["tetris"])}
    assert "pass@k" in titles and titles["pass@k"].table.header == ["k", "pass@k", "pass@k 95% CI"]


def _tool_rows(make_rollout) -> list[dict]:
    """Two prompts; tool calls and rewards chosen so every bucket's numbers are easy to write out."""
    plan = {"a": [(1, 1.0), (1, 3.0), (2, 5.0)], "b": [(1, 0.0), (2, 1.0), (2, 3.0)]}
    return [
        make_rollout(benchmark="tetris", prompt_id=p, repeat=r, tool_calls=c, reward=y, success=y > 2, reference=None)
        for p, pairs in plan.items()
        for r, (c, y) in enumerate(pairs)
    ]


def test_reward_by_tool_calls_has_clustered_cis(make_rollout, metrics_of) -> None:
    bm = metrics_of(_tool_rows(make_rollout))["benchmarks"]["tetris"]
    one, two = bm["reward_by_tool_calls"]
    # 1 call: a -> 1, 3; b -> 0. mean 4/3; residual sums a: 4 - 2*4/3 = 4/3, b: 0 - 4/3
    assert (one["tool_calls"], one["n"], one["prompts"]) == (1, 3, 2)
    assert one["mean_reward"] == pytest.approx(4 / 3)
    se = math.sqrt((4 / 3) ** 2 + (4 / 3) ** 2) / 3
    assert one["mean_reward_ci"]["se"] == pytest.approx(se)
    assert one["mean_reward_ci"]["low"] == pytest.approx(4 / 3 - 1.959963984540054 * se)
    # 2 calls: a -> 5; b -> 1, 3. mean 3; residual sums a: 5 - 3 = 2, b: 4 - 6 = -2
    assert two["mean_reward"] == pytest.approx(3.0)
    assert two["mean_reward_ci"]["se"] == pytest.approx(math.sqrt(8) / 3)
    corr = bm["ci"]["tool_calls_reward_corr"]
    assert corr["method"] == "bootstrap-prompts" and corr["n"] == 2
    assert corr["low"] <= bm["tool_calls"]["reward_corr"] <= corr["high"]


def test_corr_bootstrap_resamples_prompts_with_all_their_rollouts() -> None:
    rng = np.random.default_rng(1)
    prompts = [(rng.integers(0, 11, size=5).astype(float), rng.normal(size=5)) for _ in range(8)]
    prompts = [(x, y + 0.3 * x) for x, y in prompts]
    moments = np.array([[len(x), x.sum(), y.sum(), (x * x).sum(), (y * y).sum(), (x * y).sum()] for x, y in prompts])
    low, high = bootstrap_corr_ci(moments, resamples=300, seed=7)
    # the same resamples, drawn the same way, with r computed from the concatenated rollouts
    idx = np.random.default_rng(7).integers(0, 8, size=(300, 8))
    rs = [np.corrcoef(np.concatenate([prompts[i][0] for i in row]), np.concatenate([prompts[i][1] for i in row]))[0, 1]
          for row in idx]  # fmt: skip
    assert (low, high) == pytest.approx(tuple(np.quantile(rs, [0.025, 0.975])))
    assert bootstrap_corr_ci(moments[:1]) == (None, None)


def test_tool_tables_show_the_cis_and_tetris_diagnostics(make_rollout, metrics_of) -> None:
    rows = _tool_rows(make_rollout)
    for row in rows:
        row["info"] = {"invalid_actions": 1, "cleared_rows": int(row["success"]), "malformed_tool_calls": 0}
    from core.metrics_doc import BenchmarkMetrics

    bm = BenchmarkMetrics.model_validate(metrics_of(rows, metric_specs(["tetris"]))["benchmarks"]["tetris"])
    sections = {s.title: s.table for s in benchmark_sections(bm)}
    tools = dict(sections["Tool calls"].rows)
    assert tools["Pearson r 95% CI (bootstrap over prompts)"] != "–"
    by_count = sections["Mean reward by tool-call count"]
    assert by_count.header[4] == "mean reward 95% CI (clustered by prompt)"
    assert [r[2] for r in by_count.rows] == ["2", "2"]
    env = {r[0]: r[1] for r in sections["Environment metrics"].rows}
    assert env["invalid actions"] == "1.000" and env["cleared rows"] == "0.500"
    assert env["malformed tool calls"] == "0.000"
    summary = dict(sections["Summary"].rows)
    assert summary["standard error (lm-eval mean_stderr, ignores clustering)"] == f"{bm.accuracy_stderr:.4f}"


def test_info_is_parsed_once_during_the_scan_and_not_kept(make_rollout, write_batch, local_store) -> None:
    from tasks.analysis.load import connect, load

    files = [write_batch([make_rollout(info={"a": True, "b": "x", "c": None}), make_rollout(repeat=1, info={})])]
    con = connect(files, local_store)
    load(con, files, {"gsm8k": ["a", "b", "c", "d"]})
    names = [d[0] for d in con.execute("SELECT * FROM rollouts").description]
    assert "info" not in names
    assert con.execute("SELECT env FROM rollouts ORDER BY repeat").fetchall() == [
        (["true", '"x"', "null", None],),
        ([None] * 4,),
    ]
