"""The paired comparison where the truth is known: simulated prompt difficulties and a planted effect. The paired
interval covers the true delta at its nominal rate and is narrower than the independent one; McNemar's exact p-values
equal scipy's; flips are the prompts whose majority verdict changed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tasks.analysis.compare import clustered_delta
from tasks.analysis.paired import MCNEMAR, PAIRED, PromptCounts, flips, mcnemar_exact, paired_delta

SIMULATIONS = 1000
PROMPTS = 150
REPEATS = 4


def _accuracy_se(counts: dict[str, PromptCounts]) -> tuple[float, float]:
    """One run's accuracy and its clustered SE, as tasks/analysis/queries.py computes them."""
    total = sum(c.n for c in counts.values())
    mean = sum(c.successes for c in counts.values()) / total
    return mean, math.sqrt(math.fsum((c.successes - c.n * mean) ** 2 for c in counts.values())) / total


def _simulate(
    rng: np.random.Generator, effect: float
) -> tuple[dict[str, PromptCounts], dict[str, PromptCounts], float]:
    """Two runs over the same prompts: shared difficulty, the current run `effect` better on every prompt."""
    difficulty = rng.beta(0.6, 0.6, size=PROMPTS)
    improved = np.clip(difficulty + effect, 0.0, 1.0)
    base = rng.binomial(REPEATS, difficulty)
    cur = rng.binomial(REPEATS, improved)
    baseline = {f"p{i}": PromptCounts(REPEATS, int(s)) for i, s in enumerate(base)}
    current = {f"p{i}": PromptCounts(REPEATS, int(s)) for i, s in enumerate(cur)}
    return current, baseline, float(np.mean(improved - difficulty))


@pytest.mark.parametrize("effect", [0.0, 0.05])
def test_the_paired_interval_covers_the_true_delta_at_its_nominal_rate_and_is_narrower(effect: float) -> None:
    rng = np.random.default_rng(7)
    covered, paired_width, independent_width = 0, 0.0, 0.0
    for _ in range(SIMULATIONS):
        current, baseline, truth = _simulate(rng, effect)
        found = paired_delta(current, baseline)
        assert found is not None and found.method == PAIRED and found.shared == PROMPTS
        assert found.low is not None and found.high is not None
        covered += found.low <= truth <= found.high
        paired_width += found.high - found.low
        (p1, se1), (p0, se0) = _accuracy_se(current), _accuracy_se(baseline)
        _, low, high = clustered_delta(p1, se1, p0, se0)
        assert low is not None and high is not None and math.isclose(found.delta, p1 - p0)
        independent_width += high - low
    rate = covered / SIMULATIONS
    monte_carlo = 3 * math.sqrt(0.95 * 0.05 / SIMULATIONS)  # three standard errors of a 95% coverage estimate
    assert abs(rate - 0.95) <= monte_carlo, rate
    assert paired_width < 0.8 * independent_width, (paired_width, independent_width)  # shared difficulty removed


@pytest.mark.parametrize("b", range(0, 13, 3))
@pytest.mark.parametrize("c", [0, 1, 2, 5, 8, 20, 40])
def test_mcnemars_exact_p_value_equals_scipys(b: int, c: int) -> None:
    reference = 1.0 if b + c == 0 else stats.binomtest(min(b, c), b + c, 0.5).pvalue
    assert math.isclose(mcnemar_exact(b, c), reference, rel_tol=1e-12, abs_tol=1e-15)


def test_one_sample_per_prompt_is_tested_by_mcnemar_and_unshared_prompts_are_left_out() -> None:
    # 30 prompts right in both, 10 wrong in both, 2 lost, 9 gained; 3 prompts only in the current run
    pattern = [(1, 1)] * 30 + [(0, 0)] * 10 + [(0, 1)] * 2 + [(1, 0)] * 9
    current = {f"p{i}": PromptCounts(1, now) for i, (now, _) in enumerate(pattern)}
    baseline = {f"p{i}": PromptCounts(1, was) for i, (_, was) in enumerate(pattern)}
    current |= {f"extra{i}": PromptCounts(1, 1) for i in range(3)}
    found = paired_delta(current, baseline)
    assert found is not None and found.method == MCNEMAR
    assert (found.shared, found.only_current, found.only_baseline) == (51, 3, 0)
    assert math.isclose(found.delta, 7 / 51)
    assert math.isclose(found.p_value or -1, stats.binomtest(2, 11, 0.5).pvalue)
    assert found.detectable is not None and math.isclose(
        found.detectable, (1.959963984540054 + 0.8416212335729143) * (found.se or 0)
    )


def test_no_shared_prompt_gives_nothing_and_one_gives_no_interval() -> None:
    assert paired_delta({"a": PromptCounts(2, 1)}, {"b": PromptCounts(2, 1)}) is None
    one = paired_delta({"a": PromptCounts(4, 3)}, {"a": PromptCounts(4, 1)})
    assert one is not None and one.delta == 0.5 and one.se is None and one.low is None and one.p_value is None


def test_flips_by_majority_of_repeats_largest_change_first() -> None:
    baseline = {"a": PromptCounts(4, 4), "b": PromptCounts(4, 3), "c": PromptCounts(4, 0), "d": PromptCounts(4, 2)}
    current = {"a": PromptCounts(4, 0), "b": PromptCounts(4, 2), "c": PromptCounts(4, 3), "d": PromptCounts(4, 4)}
    lost, gained = flips(current, baseline)
    assert [(f.prompt_id, f.current - f.baseline) for f in lost] == [("a", -1.0), ("b", -0.25)]  # a tie is wrong
    assert [(f.prompt_id, f.current - f.baseline) for f in gained] == [("c", 0.75), ("d", 0.5)]
