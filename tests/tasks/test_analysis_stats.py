"""The estimators: pass@k, the k values reported, Wilson intervals and the prompt-level bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tasks.analysis.stats import bootstrap_mean_ci, ks_for, pass_at_k, wilson_interval


def test_pass_at_k_estimator() -> None:
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 1, 4) == pytest.approx(1.0)
    assert [pass_at_k(4, 0, k) for k in (1, 2, 4)] == [0.0, 0.0, 0.0]
    assert [pass_at_k(4, 4, k) for k in (1, 2, 4)] == [1.0, 1.0, 1.0]
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(5, 2))
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 4)


def test_ks_are_powers_of_two_plus_n() -> None:
    assert ks_for(0) == []
    assert ks_for(1) == [1]
    assert ks_for(4) == [1, 2, 4]
    assert ks_for(6) == [1, 2, 4, 6]
    assert ks_for(16) == [1, 2, 4, 8, 16]


def test_wilson_interval_known_values() -> None:
    low, high = wilson_interval(0.8, 10)
    assert (round(low, 3), round(high, 3)) == (0.490, 0.943)
    assert wilson_interval(0.0, 10) == (0.0, pytest.approx(0.2775, abs=1e-4))
    assert wilson_interval(1.0, 10) == (pytest.approx(0.7225, abs=1e-4), 1.0)
    low, high = wilson_interval(0.5, 100)
    assert (round(low, 4), round(high, 4)) == (0.4038, 0.5962)
    assert wilson_interval(0.5, 0) == (None, None) and wilson_interval(None, 10) == (None, None)


def test_bootstrap_is_seeded_and_contains_the_mean() -> None:
    rng = np.random.default_rng(1)
    counts = np.full(40, 4)
    sums = rng.binomial(4, 0.6, size=40).astype(float)
    mean = sums.sum() / counts.sum()
    first = bootstrap_mean_ci(sums, counts)
    assert first == bootstrap_mean_ci(sums, counts)  # deterministic: seeded
    assert first[0] < mean < first[1]
    assert 0.05 < first[1] - first[0] < 0.5
    assert bootstrap_mean_ci(sums, counts, seed=2) != first
    assert bootstrap_mean_ci(np.array([3.0]), np.array([4])) == (None, None)  # one prompt: no interval
    assert bootstrap_mean_ci(np.array([2.0, 2.0]), np.array([4, 4])) == (0.5, 0.5)


def test_bootstrap_resamples_prompts_not_rollouts() -> None:
    """Ten prompts that always or never succeed: 100 rollouts, but only 10 independent units."""
    sums, counts = np.array([10.0] * 5 + [0.0] * 5), np.full(10, 10)
    low, high = bootstrap_mean_ci(sums, counts)
    naive_low, naive_high = wilson_interval(0.5, 100)
    assert high - low > 1.5 * (naive_high - naive_low)
