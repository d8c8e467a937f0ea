"""The estimators behind the metrics: pass@k, Wilson score intervals and the prompt-level bootstrap."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from core.metrics_doc import ClusteredInterval, Interval

CI_LEVEL = 0.95
Z_95 = 1.959963984540054
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


class AtK(NamedTuple):
    """A per-prompt metric at k (pass@k, maj@k) averaged over the prompts with at least k repeats; `value`
    is None where no prompt has enough."""

    value: float | None
    prompts: int


def ks_for(n: int) -> list[int]:
    """The k values reported for a benchmark whose prompts have at most n repeats."""
    if n < 1:
        return []
    ks = {n}
    k = 1
    while k <= n:
        ks.add(k)
        k *= 2
    return sorted(ks)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one prompt (n samples, c correct); the product form avoids huge binomials."""
    if k > n:
        raise ValueError(f"pass@{k} is undefined for n={n} samples")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def wilson_interval(rate: float | None, n: int, z: float = Z_95) -> tuple[float | None, float | None]:
    """Wilson score interval for a rate observed over n trials (None when n is 0 or the rate unknown)."""
    if rate is None or n <= 0:
        return None, None
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (rate + z2 / (2 * n)) / denom
    half = z * math.sqrt(max(rate * (1.0 - rate), 0.0) / n + z2 / (4 * n * n)) / denom
    low = 0.0 if rate <= 0.0 else max(0.0, center - half)
    high = 1.0 if rate >= 1.0 else min(1.0, center + half)
    return low, high


def wilson_ci(rate: float | None, n: int) -> Interval:
    """A Wilson interval as the metrics document stores it."""
    low, high = wilson_interval(rate, n)
    return Interval(low=low, high=high, n=n, method="wilson")


def _resampled_sums(columns: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Column sums of `resamples` resamples of the rows (clusters) with replacement: (resamples, columns)."""
    n = len(columns)
    rng = np.random.default_rng(seed)
    out = np.empty((resamples, columns.shape[1]))
    chunk = max(1, 2_000_000 // n)  # bounded memory: chunk x n indices at a time
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        for j in range(columns.shape[1]):
            out[start:stop, j] = columns[:, j][idx].sum(axis=1)
    return out


def _percentiles(stats: np.ndarray, level: float) -> tuple[float | None, float | None]:
    stats = stats[np.isfinite(stats)]
    if not len(stats):
        return None, None
    tail = (1.0 - level) / 2
    low, high = np.quantile(stats, [tail, 1.0 - tail])
    return float(low), float(high)


def bootstrap_mean_ci(
    sums: np.ndarray,
    counts: np.ndarray,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = CI_LEVEL,
) -> tuple[float | None, float | None]:
    """Percentile bootstrap of sum(sums)/sum(counts), resampling clusters (prompts) with replacement."""
    if len(sums) < 2:
        return None, None
    found = _resampled_sums(np.column_stack([sums, counts]).astype(np.float64), resamples, seed)
    return _percentiles(found[:, 0] / found[:, 1], level)


def bootstrap_corr_ci(
    moments: np.ndarray,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = CI_LEVEL,
) -> tuple[float | None, float | None]:
    """Percentile bootstrap of Pearson's r over rollouts, resampling clusters (prompts) with replacement.

    `moments` has one row per cluster: (n, sum x, sum y, sum x^2, sum y^2, sum xy) of its rollouts, so
    a resample's r comes from summed moments without touching the rollouts. Resamples where x or y is
    constant (r undefined) are left out.
    """
    if len(moments) < 2:
        return None, None
    n, sx, sy, sxx, syy, sxy = _resampled_sums(np.asarray(moments, dtype=np.float64), resamples, seed).T
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (n * sxy - sx * sy) / np.sqrt((n * sxx - sx * sx) * (n * syy - sy * sy))
    return _percentiles(r, level)


def clustered_interval(
    mean: float | None, se: float | None, clusters: int, rollouts: int, clip: bool
) -> ClusteredInterval:
    """mean +/- z * clustered SE (clipped to [0, 1] for a rate), as the metrics document stores it; null
    bounds with fewer than 2 clusters (the SE is 0 for one cluster, not "no uncertainty").

    A rate whose every prompt scored the same (all wrong, all right) has a clustered SE of 0, and mean +/- 0
    would claim certainty ("0.0-0.0%" from 12 prompts). The repeats then show nothing beyond one draw per
    prompt, so the interval is Wilson's over the prompts (`wilson-prompts`: 0 of 12 is 0-24%)."""
    method = "clustered-prompts"
    if mean is None or se is None or clusters < 2:
        low = high = None
    elif clip and se <= 0.0:
        (low, high), method = wilson_interval(mean, clusters), "wilson-prompts"
    else:
        low, high = mean - Z_95 * se, mean + Z_95 * se
        if clip:
            low, high = max(0.0, low), min(1.0, high)
    return ClusteredInterval(low=low, high=high, n=clusters, rollouts=rollouts, se=se, method=method)
