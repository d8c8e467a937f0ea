"""The comparison gate (tasks/analysis/gate.py, core/gate_config.py): which drops fail it, by rule, threshold,
benchmark and metric."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.config import EvalConfig
from core.gate_config import GateConfig
from core.record import Comparison, ComparisonRow
from tasks.analysis.gate import describe, gate


def row(delta: float, low: float | None, high: float | None, regression: bool = False, label: str = "accuracy"):
    return ComparisonRow(
        label=label, kind="rate", method="paired-clustered", current=0.5 + delta, baseline=0.5, delta=delta,
        low=low, high=high, n_current=100, n_baseline=100, regression=regression,
    )  # fmt: skip


def comparison(**benchmarks: dict[str, ComparisonRow]) -> Comparison:
    return Comparison(level=0.95, benchmarks=benchmarks)


def failed(doc: Comparison, **config: object) -> list[tuple[str, str]]:
    verdict = gate(doc, GateConfig.model_validate(config))
    assert verdict.passed == (not verdict.failures)
    return [(f.benchmark, f.metric) for f in verdict.failures]


def test_by_default_a_significant_drop_fails_and_noise_does_not() -> None:
    doc = comparison(
        gsm8k={"accuracy": row(-0.05, -0.08, -0.02, regression=True), "pass@1": row(-0.05, -0.12, 0.02)},
        math={"accuracy": row(0.03, 0.01, 0.05)},  # a significant gain
    )
    assert failed(doc) == [("gsm8k", "accuracy")]
    verdict = gate(doc, GateConfig())
    assert verdict.checked == 3 and verdict.rules == {}
    assert describe(verdict) == "gate FAILED (1 of 3 metrics): gsm8k accuracy CI bound -0.0200 beyond 0"


def test_ci_rule_with_a_threshold_fails_only_when_the_whole_interval_is_beyond_it() -> None:
    doc = comparison(gsm8k={"accuracy": row(-0.05, -0.08, -0.02, regression=True)})
    assert failed(doc, max_drop=0.01) == [("gsm8k", "accuracy")]  # surely lost more than a point
    assert failed(doc, max_drop=0.02) == []  # the CI reaches -2 points: not surely more than 2 lost
    assert failed(doc, max_drop=0.03) == []


def test_absolute_rule_judges_the_point_estimate_whatever_the_interval() -> None:
    doc = comparison(gsm8k={"accuracy": row(-0.05, -0.3, 0.2), "pass@1": row(-0.01, None, None)})
    assert failed(doc, rule="absolute", max_drop=0.04) == [("gsm8k", "accuracy")]
    assert failed(doc, rule="absolute", max_drop=0.005) == [("gsm8k", "accuracy"), ("gsm8k", "pass@1")]
    assert failed(doc, max_drop=0.005) == []  # rule ci: no interval, no verdict of a drop


def test_per_benchmark_rules_and_metric_selection() -> None:
    doc = comparison(
        gsm8k={"accuracy": row(-0.05, -0.08, -0.02, regression=True)},
        tetris={"accuracy": row(-0.05, -0.08, -0.02, regression=True), "pass@n": row(-0.25, -0.35, -0.15, True)},
    )
    config = {"max_drop": 0.0, "benchmarks": {"tetris": {"max_drop": 0.1}}}
    assert failed(doc, **config) == [("gsm8k", "accuracy"), ("tetris", "pass@n")]
    assert failed(doc, metrics=["pass@n"]) == [("tetris", "pass@n")]
    assert gate(doc, GateConfig(metrics=["pass@n"])).checked == 1


def test_a_rise_in_truncation_while_reasoning_is_the_drop() -> None:
    truncated = row(0.1, 0.05, 0.15, regression=True, label="truncated while reasoning")
    doc = comparison(qwen={"ended_in_reasoning": truncated})
    assert failed(doc) == [("qwen", "ended_in_reasoning")]
    (failure,) = gate(doc, GateConfig()).failures
    assert failure.bound == pytest.approx(0.05)
    assert failed(doc, max_drop=0.06) == []
    fell = comparison(qwen={"ended_in_reasoning": row(-0.1, -0.15, -0.05, label="truncated while reasoning")})
    assert failed(fell, rule="absolute", max_drop=0.01) == []  # less truncation is better


def test_gate_settings_are_checked_where_they_enter() -> None:
    with pytest.raises(ValidationError, match="rule 'absolute' needs a drop to allow"):
        GateConfig(rule="absolute")
    with pytest.raises(ValidationError, match="max_drop"):
        GateConfig(max_drop=-0.1)
    with pytest.raises(ValidationError, match="max_dorp"):
        EvalConfig.model_validate({"gate": {"max_dorp": 0.1}})
    assert (
        EvalConfig.model_validate({"gate": {"benchmarks": {"gsm8k": {"max_drop": 0.02}}}})
        .gate.rule_for("gsm8k")
        .max_drop
        == 0.02
    )
