"""Paired comparison of two runs over the prompts they share: the delta's cluster-robust SE, McNemar's exact test,
the smallest change the pair could have detected, and the prompts that flipped.

Why paired: two runs of one benchmark (last night's and the baseline, step 300 and step 400) nearly always ask the
same prompts, and most of a prompt's difficulty is shared by both runs. The independent interval
(tasks/analysis/compare.py, ``sqrt(se1^2 + se0^2)``) ignores that covariance; the paired one removes it, so its
interval is narrower wherever the runs agree on which prompts are hard, and never wrong where they do not.

- The delta is d = p1 - p0 over the shared prompts, each p the run's accuracy there (successes over rollouts, as the
  headline accuracy). Its SE is the same cluster-robust estimator as accuracy's (tasks/analysis/queries.py),
  applied to the difference: per prompt i, ``u_i = (s1_i - n1_i p1) / N1 - (s0_i - n0_i p0) / N0`` and
  ``SE = sqrt(sum_i u_i^2)``; with independent runs it is ``sqrt(se1^2 + se0^2)`` less twice their covariance.
- Where every shared prompt has one rollout in each run, McNemar's exact test gives the p-value: of the b prompts
  right only in the baseline and the c right only in the current run, ``2 P(X <= min(b, c))`` for X ~ Bin(b + c,
  1/2), capped at 1. Otherwise the p-value is the Wald test of d / SE.
- ``detectable`` is the smallest |delta| this pair would find at 5% (two-sided) with 80% power:
  ``(z_0.975 + z_0.8) SE``, so "no significant change" reads as what it is.
- Prompts in only one run are counted and left out of the paired estimate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from core.metrics_doc import BenchmarkMetrics, PromptRow
from core.record import FlippedPrompt, Pairing
from tasks.analysis.stats import Z_95, pass_at_k

MAX_FLIPS = 100  # flipped prompts listed per direction and benchmark (all are counted)
Z_80 = 0.8416212335729143  # the standard normal's 80th percentile: power 0.8
PAIRED = "paired-clustered"
MCNEMAR = "paired-mcnemar-exact"


@dataclass(frozen=True)
class PromptCounts:
    """One prompt's rollouts and successes in one run."""

    n: int
    successes: int

    @property
    def rate(self) -> float:
        return self.successes / self.n


@dataclass(frozen=True)
class PairedDelta:
    """The paired delta of accuracy over the shared prompts, and what the pair can tell."""

    current: float  # the current run's value over the shared prompts
    baseline: float
    delta: float
    se: float | None  # None with fewer than 2 shared prompts
    low: float | None
    high: float | None
    p_value: float | None
    detectable: float | None  # the smallest |delta| found at 5% with 80% power
    shared: int  # prompts in both runs (the paired estimate's clusters)
    only_current: int
    only_baseline: int
    method: Literal["paired-clustered", "paired-mcnemar-exact"]


def mcnemar_exact(b: int, c: int) -> float:
    """McNemar's exact two-sided p-value from the discordant pairs (b one way, c the other)."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be non-negative, got {b}, {c}")
    n = b + c
    if n == 0:
        return 1.0
    tail = math.fsum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def _normal_two_sided(z: float) -> float:
    return math.erfc(abs(z) / math.sqrt(2.0))


def paired_delta(current: Mapping[str, PromptCounts], baseline: Mapping[str, PromptCounts]) -> PairedDelta | None:
    """The paired delta over the prompts both runs asked (keys: prompt id and content, matched by the caller);
    None when they share none."""
    shared = sorted(set(current) & set(baseline))
    only_current, only_baseline = len(set(current) - set(baseline)), len(set(baseline) - set(current))
    pairs = [(current[k], baseline[k]) for k in shared if current[k].n > 0 and baseline[k].n > 0]
    if not pairs:
        return None
    n1, n0 = sum(c.n for c, _ in pairs), sum(b.n for _, b in pairs)
    p1 = sum(c.successes for c, _ in pairs) / n1
    p0 = sum(b.successes for _, b in pairs) / n0
    delta = p1 - p0
    common = {"current": p1, "baseline": p0, "delta": delta, "shared": len(pairs)}
    common |= {"only_current": only_current, "only_baseline": only_baseline}
    single = all(c.n == 1 and b.n == 1 for c, b in pairs)
    method: Literal["paired-clustered", "paired-mcnemar-exact"] = MCNEMAR if single else PAIRED
    if len(pairs) < 2:
        return PairedDelta(**common, se=None, low=None, high=None, p_value=None, detectable=None, method=method)
    u = [(c.successes - c.n * p1) / n1 - (b.successes - b.n * p0) / n0 for c, b in pairs]
    se = math.sqrt(math.fsum(x * x for x in u))
    low, high = delta - Z_95 * se, delta + Z_95 * se
    if single:
        b_ = sum(1 for c, b in pairs if b.successes and not c.successes)
        c_ = sum(1 for c, b in pairs if c.successes and not b.successes)
        p_value: float | None = mcnemar_exact(b_, c_)
    else:
        p_value = _normal_two_sided(delta / se) if se > 0 else (1.0 if delta == 0 else 0.0)
    detectable = (Z_95 + Z_80) * se if se > 0 else None  # no difference seen: power unknown
    return PairedDelta(**common, se=se, low=low, high=high, p_value=p_value, detectable=detectable, method=method)


def paired_values(current: Mapping[str, float], baseline: Mapping[str, float]) -> PairedDelta | None:
    """The paired delta of a per-prompt value (pass@k's estimator) averaged over the prompts both runs have: the mean
    of the per-prompt differences, SE ``sqrt(sum_i (d_i - mean d)^2) / m`` (prompts independent, as accuracy's
    cluster-robust SE); None when they share none."""
    shared = sorted(set(current) & set(baseline))
    only_current, only_baseline = len(set(current) - set(baseline)), len(set(baseline) - set(current))
    if not shared:
        return None
    diffs = [current[k] - baseline[k] for k in shared]
    m = len(diffs)
    delta = math.fsum(diffs) / m
    values = {
        "current": math.fsum(current[k] for k in shared) / m,
        "baseline": math.fsum(baseline[k] for k in shared) / m,
    }
    common = {**values, "delta": delta, "shared": m, "only_current": only_current, "only_baseline": only_baseline}
    if m < 2:
        return PairedDelta(**common, se=None, low=None, high=None, p_value=None, detectable=None, method=PAIRED)
    se = math.sqrt(math.fsum((d - delta) ** 2 for d in diffs)) / m
    p_value = _normal_two_sided(delta / se) if se > 0 else (1.0 if delta == 0 else 0.0)
    low, high = delta - Z_95 * se, delta + Z_95 * se
    detectable = (Z_95 + Z_80) * se if se > 0 else None  # no difference seen: power unknown
    return PairedDelta(**common, se=se, low=low, high=high, p_value=p_value, detectable=detectable, method=PAIRED)


def flips(
    current: Mapping[str, PromptCounts], baseline: Mapping[str, PromptCounts]
) -> tuple[list[FlippedPrompt], list[FlippedPrompt]]:
    """(right to wrong, wrong to right) by the majority of each prompt's repeats (a tie counts as wrong), each list
    ordered by the size of the pass@1 change, largest first."""
    lost: list[FlippedPrompt] = []
    gained: list[FlippedPrompt] = []
    for key in sorted(set(current) & set(baseline)):
        c, b = current[key], baseline[key]
        if not c.n or not b.n:
            continue
        was, now = b.successes * 2 > b.n, c.successes * 2 > c.n
        if was != now:
            (lost if was else gained).append(FlippedPrompt(prompt_id=key, baseline=b.rate, current=c.rate))
    lost.sort(key=lambda f: (f.current - f.baseline, f.prompt_id))
    gained.sort(key=lambda f: (f.baseline - f.current, f.prompt_id))
    return lost, gained


@dataclass(frozen=True)
class Matched:
    """Two documents' prompts of one benchmark, matched by prompt id and content (see match_prompts)."""

    current_rows: dict[str, PromptRow]
    baseline_rows: dict[str, PromptRow]
    changed: int  # same id, different content: in neither map
    by_id: bool  # a document without prompt hashes (schema <= 6): matched by id alone

    @cached_property
    def current(self) -> dict[str, PromptCounts]:
        return {k: PromptCounts(r.n, r.successes) for k, r in self.current_rows.items()}

    @cached_property
    def baseline(self) -> dict[str, PromptCounts]:
        return {k: PromptCounts(r.n, r.successes) for k, r in self.baseline_rows.items()}

    def rate_counts(self, key: str) -> tuple[dict[str, PromptCounts], dict[str, PromptCounts]]:
        """An environment's headline rate per prompt, as (trues, n) counts, in each run (prompts without it left
        out: documents of schema <= 6 have none)."""

        def counts(rows: dict[str, PromptRow]) -> dict[str, PromptCounts]:
            return {k: PromptCounts(r.rates[key][1], r.rates[key][0]) for k, r in rows.items() if key in r.rates}

        return counts(self.current_rows), counts(self.baseline_rows)

    def pairing(self) -> Pairing:
        current, baseline = self.current, self.baseline
        lost, gained = flips(current, baseline)
        return Pairing(
            shared=len(current.keys() & baseline.keys()),
            only_current=len(current.keys() - baseline.keys()),
            only_baseline=len(baseline.keys() - current.keys()),
            changed=self.changed,
            lost_count=len(lost),
            gained_count=len(gained),
            lost=lost[:MAX_FLIPS],
            gained=gained[:MAX_FLIPS],
        )


def _covers(bm: BenchmarkMetrics) -> bool:
    return bool(bm.per_prompt) and sum(p.n for p in bm.per_prompt) == bm.n_rollouts


def match_prompts(cur: BenchmarkMetrics, base: BenchmarkMetrics) -> Matched | None:
    """The prompts of both documents keyed by id, a prompt whose content changed (its hash differs) left out of both;
    None when either document lacks per-prompt rows covering its rollouts, or they share no prompt."""
    if not (_covers(cur) and _covers(base)):
        return None
    rows1, rows0 = {r.prompt_id: r for r in cur.per_prompt}, {r.prompt_id: r for r in base.per_prompt}
    changed = {
        k
        for k in rows1.keys() & rows0.keys()
        if rows1[k].prompt_hash and rows0[k].prompt_hash and rows1[k].prompt_hash != rows0[k].prompt_hash
    }
    current = {k: r for k, r in rows1.items() if k not in changed}
    baseline = {k: r for k, r in rows0.items() if k not in changed}
    if not current.keys() & baseline.keys():
        return None
    by_id = any(r.prompt_hash is None for r in (*cur.per_prompt, *base.per_prompt))
    return Matched(current, baseline, len(changed), by_id)


def paired_pass_at_k(matched: Matched, k: int) -> PairedDelta | None:
    """pass@k paired over the shared prompts with at least k repeats in both runs."""

    def values(counts: dict[str, PromptCounts]) -> dict[str, float]:
        return {key: pass_at_k(c.n, c.successes, k) for key, c in counts.items() if c.n >= k}

    return paired_values(values(matched.current), values(matched.baseline))
