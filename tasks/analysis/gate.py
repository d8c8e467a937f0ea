"""The comparison gate: does a run pass against its baseline? A metric fails when it dropped beyond its rule's
threshold (core.gate_config): with rule "ci", when the delta's 95% CI lies wholly beyond a drop of `max_drop` (with
max_drop 0, exactly the comparison's regression flag); with rule "absolute", when the delta itself is a drop larger
than `max_drop`. For the truncated-while-reasoning rate a rise is the drop. A row without an interval never fails a
"ci" rule: a gate that cannot tell says so in the verdict's `checked` count rather than guessing."""

from __future__ import annotations

from core.gate_config import GateConfig, GateRule
from core.record import Comparison, ComparisonRow, GateFailure, GateVerdict

LOWER_IS_BETTER = frozenset({"ended_in_reasoning"})


def _failure(benchmark: str, metric: str, row: ComparisonRow, rule: GateRule) -> GateFailure | None:
    sign = -1.0 if metric in LOWER_IS_BETTER else 1.0  # the change as a gain: negative is worse
    gain = sign * row.delta
    # the CI's bound nearer to "no worse": the high end of a gain's interval
    bound = None if row.low is None or row.high is None else max(sign * row.low, sign * row.high)
    if rule.rule == "ci":
        failed = bound is not None and bound < -rule.max_drop and (rule.max_drop > 0 or row.regression)
    else:
        failed = gain < -rule.max_drop
    if not failed:
        return None
    return GateFailure(
        benchmark=benchmark,
        metric=metric,
        label=row.label,
        delta=row.delta,
        bound=None if bound is None else sign * bound,
        threshold=rule.max_drop,
        rule=rule.rule,
    )


def gate(comparison: Comparison, config: GateConfig) -> GateVerdict:
    """The verdict over every comparison row the config gates (each benchmark by its own rule, else the default)."""
    failures: list[GateFailure] = []
    checked = 0
    for benchmark, rows in comparison.benchmarks.items():
        rule = config.rule_for(benchmark)
        for metric, row in rows.items():
            if rule.metrics is not None and metric not in rule.metrics:
                continue
            checked += 1
            failure = _failure(benchmark, metric, row, rule)
            if failure is not None:
                failures.append(failure)
    rules = config.model_dump(mode="json", exclude_defaults=True)
    return GateVerdict(passed=not failures, checked=checked, failures=failures, rules=rules)


def describe(verdict: GateVerdict) -> str:
    """One line: the verdict and, on failure, each metric that failed."""
    if verdict.passed:
        return f"gate passed ({verdict.checked} metrics checked)"
    parts = []
    for f in verdict.failures:
        how = f"CI bound {f.bound:+.4f}" if f.rule == "ci" and f.bound is not None else f"delta {f.delta:+.4f}"
        limit = f"a drop of {f.threshold:g}" if f.threshold else "0"
        parts.append(f"{f.benchmark} {f.label} {how} beyond {limit}")
    return f"gate FAILED ({len(verdict.failures)} of {verdict.checked} metrics): " + "; ".join(parts)
