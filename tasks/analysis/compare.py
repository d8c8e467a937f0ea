"""Compare a run with a baseline run: per benchmark, each headline metric's delta with a 95% CI.

Why these intervals (no resampling of either run is needed; both come from the metrics documents):

- Paired, where the runs asked the same prompts (tasks/analysis/paired.py; matched by prompt id and the prompt's
  content hash from the documents' ``per_prompt`` rows): accuracy, pass@k (pass@1 and the largest common k) and the
  environments' headline rates (from each prompt's counts, ``per_prompt[].rates``) are compared over the shared
  prompts only, as per-prompt differences with an SE clustered by prompt (McNemar's exact
  test decides accuracy where every prompt has one sample). A prompt's difficulty is shared by both runs, so the
  paired interval is much narrower than the independent one where they agree on which prompts are hard. The row's
  current and baseline values are then the shared prompts', its n the shared prompts, its method
  ``paired-clustered`` or ``paired-mcnemar-exact`` (`` (matched by id)`` for documents without prompt hashes).
  Everything below is the independent comparison, for runs that share no prompt (or documents without per-prompt
  rows), and for maj@k and mean reward, whose per-prompt values the documents lack.
- Accuracy is clustered by prompt, like its headline CI (tasks/analysis/metrics.py): a prompt's repeats
  share its difficulty, so 100 repeats of a prompt are not 100 independent samples. The runs are
  independent, so d = p1 - p0 has ``d +/- 1.96 * sqrt(se1^2 + se0^2)`` from each run's cluster-robust SE
  (``ci.accuracy.se``; n is prompts). A document without it (schema_version <= 3, whose ci.accuracy is a
  Wilson interval) gets its SE recomputed from its ``per_prompt`` rows (n, successes) when they cover
  all its rollouts; failing that, both sides fall back to Newcombe over rollouts (below) and the row's
  ``method`` says so. Fewer than 2 prompts in either run: no interval (one prompt shows no spread).
- The other rates (pass@k, maj@k, the environments' headline rates) use Newcombe's hybrid score
  interval for a difference of proportions: with Wilson intervals [l1, u1] around the current rate p1
  and [l0, u0] around the baseline rate p0, the delta d = p1 - p0 has
  ``[d - sqrt((p1 - l1)^2 + (u0 - p0)^2), d + sqrt((u1 - p1)^2 + (p0 - l0)^2)]``. It is the normal
  approximation of the difference, built from score intervals, so it stays sensible at 0% or 100%
  where the plain Wald interval collapses to a point. n is the rate's own denominator: prompts for
  pass@k/maj@k (one value per prompt, prompts independent: valid), rollouts for the env rates. The env
  rates are not clustered: the document holds only each one's rate and n, not its per-prompt counts,
  so with many repeats their intervals are too narrow and a flag on them deserves a second look.
- Mean reward combines the two runs' prompt-level bootstrap CIs the same way: each side's
  half-width (below and above its mean) is added in quadrature. Runs without a bootstrap CI
  (fewer than 2 prompts, or a schema-1 baseline) get no interval and are never flagged.

Env rates compared are the current run's headline rates (declared headline by the environment:
higher is better), matched by key with the baseline's env metrics (a schema-2 baseline's info rates
count, see core.metrics_doc.BenchmarkMetrics).

A reasoning model's truncated-while-reasoning rate (both runs reasoned) is compared like an env rate, where
lower is better: a rise whose CI lies above 0 is a regression.

Every row carries its SE (read off the interval where the method has none of its own) and ``detectable``, the
smallest change the pair would flag at 5% with 80% power, ``(z_0.975 + z_0.8) SE``.

``regression`` is true when the metric dropped and the delta's CI lies entirely below 0 (rose and above 0 for the
truncated-while-reasoning rate); ``improvement`` the mirror image. Metrics of benchmarks present in only one run
are listed under ``missing``. pass@n/maj@n compare the largest k both runs report (the label says which k).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from typing import Any, Literal

from core.metrics_doc import BenchmarkMetrics, RunMetrics
from core.record import Comparison, ComparisonRow, IndexEntry, Missing, RunInfo, RunRecord, RunSummary
from core.store import Store, StoreError
from tasks.analysis.paired import MCNEMAR, Z_80, Matched, PairedDelta, match_prompts, paired_delta, paired_pass_at_k
from tasks.analysis.stats import CI_LEVEL, Z_95, wilson_interval

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Intervals


def rate_delta(p1: float, n1: int, p0: float, n0: int) -> tuple[float, float | None, float | None]:
    """(delta, low, high) of p1 - p0 by Newcombe's hybrid score method (Wilson intervals combined)."""
    l1, u1 = wilson_interval(p1, n1)
    l0, u0 = wilson_interval(p0, n0)
    return _combine(p1, l1, u1, p0, l0, u0)


def clustered_delta(
    p1: float, se1: float | None, p0: float, se0: float | None
) -> tuple[float, float | None, float | None]:
    """(delta, low, high) of p1 - p0 for independent runs: delta +/- z * sqrt(se1^2 + se0^2)."""
    delta = p1 - p0
    if se1 is None or se0 is None:
        return delta, None, None
    half = Z_95 * math.hypot(se1, se0)
    return delta, delta - half, delta + half


def accuracy_se(bm: BenchmarkMetrics) -> tuple[float | None, int, str | None]:
    """(clustered SE of the accuracy, prompts, source: "ci" or "per_prompt"); source None when the document
    has neither ``ci.accuracy.se`` nor per-prompt rows covering its rollouts. SE None with fewer than 2
    prompts (a single prompt's SE is 0, not "no uncertainty")."""
    ci = bm.ci.accuracy
    if ci.se is not None:
        return (ci.se if ci.n >= 2 else None), ci.n, "ci"
    rows = bm.per_prompt
    total = sum(p.n for p in rows)
    if total == 0 or total != bm.n_rollouts:
        return None, len(rows), None
    mean = sum(p.successes for p in rows) / total
    # Same estimator as tasks/analysis/queries.py's accuracy_se: sqrt(sum_i (successes_i - n_i mean)^2) / N.
    se = math.sqrt(math.fsum((p.successes - p.n * mean) ** 2 for p in rows)) / total
    return (se if len(rows) >= 2 else None), len(rows), "per_prompt"


def _combine(
    x1: float, l1: float | None, u1: float | None, x0: float, l0: float | None, u0: float | None
) -> tuple[float, float | None, float | None]:
    delta = x1 - x0
    if l1 is None or u1 is None or l0 is None or u0 is None:
        return delta, None, None
    return delta, delta - math.hypot(x1 - l1, u0 - x0), delta + math.hypot(u1 - x1, x0 - l0)


# ---------------------------------------------------------------------------------------------
# Which numbers to compare


def _largest_common_k(cur: dict[str, float | None], base: dict[str, float | None]) -> str | None:
    common = {k for k, v in cur.items() if v is not None} & {k for k, v in base.items() if v is not None}
    return max(common, key=int) if common else None


def _k_rate(bm: BenchmarkMetrics, metric: str, k: str) -> tuple[float | None, int]:
    """(rate, prompts it averages over); documents without a `ci` block fall back to all prompts."""
    values, cis = (bm.pass_at_k, bm.ci.pass_at_k) if metric == "pass_at_k" else (bm.maj_at_k, bm.ci.maj_at_k)
    interval = cis.get(k)
    return values.get(k), interval.n if interval is not None else bm.n_prompts


def _rates(cur: BenchmarkMetrics, base: BenchmarkMetrics) -> list[tuple[str, str, tuple[Any, int], tuple[Any, int]]]:
    """(row name, label, (current rate, n), (baseline rate, n)) of every rate but accuracy both runs can compare."""
    out: list[tuple[str, str, tuple[Any, int], tuple[Any, int]]] = []
    if cur.pass_at_k.get("1") is not None and base.pass_at_k.get("1") is not None:
        out.append(("pass@1", "pass@1", _k_rate(cur, "pass_at_k", "1"), _k_rate(base, "pass_at_k", "1")))
    for name, metric in (("pass@n", "pass_at_k"), ("maj@n", "maj_at_k")):
        k = _largest_common_k(getattr(cur, metric), getattr(base, metric))
        if k is not None and not (metric == "pass_at_k" and k == "1"):
            out.append((name, f"{name[:-2]}@{k}", _k_rate(cur, metric, k), _k_rate(base, metric, k)))
    for metric in cur.env_metrics:
        old = base.env_metric(metric.key)
        if metric.kind == "rate" and metric.headline and old is not None and old.kind == "rate":
            out.append((metric.key, metric.label, (metric.value, metric.n), (old.value, old.n)))
    return out


def _paired_row(label: str, pd: PairedDelta, matched: Matched) -> ComparisonRow:
    method = pd.method + (" (matched by id)" if matched.by_id else "")
    # McNemar's exact test decides a one-sample-per-prompt row; its Wald CI is shown beside it
    significant = pd.p_value is not None and pd.p_value < 1 - CI_LEVEL if pd.method == MCNEMAR else None
    return _row(
        label, "rate", pd.current, pd.baseline, (pd.delta, pd.low, pd.high), (pd.shared, pd.shared), method,
        se=pd.se, p_value=pd.p_value, detectable=pd.detectable, significant=significant,
    )  # fmt: skip


def _paired_rate(matched: Matched, name: str, label: str) -> PairedDelta | None:
    """pass@1 / pass@n by their per-prompt estimator, an environment's headline rate by its per-prompt counts; maj@k
    has no per-prompt value in the document (None: compared as independent)."""
    if name in ("pass@1", "pass@n"):
        return paired_pass_at_k(matched, int(label.split("@")[1]))
    if name == "maj@n":
        return None
    return paired_delta(*matched.rate_counts(name))


def accuracy_row(cur: BenchmarkMetrics, base: BenchmarkMetrics, matched: Matched | None = None) -> ComparisonRow | None:
    """The accuracy row: paired over the shared prompts where both documents have per-prompt rows, else clustered by
    prompt for independent runs where both documents allow it (see the module docstring)."""
    p1, p0 = cur.accuracy, base.accuracy
    if p1 is None or p0 is None:
        return None
    pd = paired_delta(matched.current, matched.baseline) if matched is not None else None
    if matched is not None and pd is not None:
        return _paired_row("accuracy", pd, matched)
    (se1, n1, src1), (se0, n0, src0) = accuracy_se(cur), accuracy_se(base)
    if src1 is None or src0 is None:
        which = "current run" if src1 is None else "baseline"
        method = f"newcombe-rollouts (the {which} has neither a clustered SE nor per-prompt rows)"
        delta_ci = rate_delta(p1, cur.n_rollouts, p0, base.n_rollouts)
        return _row("accuracy", "rate", p1, p0, delta_ci, (cur.n_rollouts, base.n_rollouts), method)
    if min(n1, n0) >= 2 and 0.0 in (se1, se0):
        # a run whose every prompt scored the same has a clustered SE of 0, which would count it as exact: both
        # runs as one draw per prompt instead (Wilson over prompts, as its own interval is; Newcombe's combination)
        which = " and ".join(name for name, se in (("current run", se1), ("baseline", se0)) if se == 0.0)
        method = f"newcombe-prompts (the {which} scored the same on every prompt: clustered SE 0)"
        return _row("accuracy", "rate", p1, p0, rate_delta(p1, n1, p0, n0), (n1, n0), method)
    method = "clustered-prompts"
    redone = [name for name, src in (("current run", src1), ("baseline", src0)) if src == "per_prompt"]
    if redone:
        method += f" ({' and '.join(redone)}: SE recomputed from per_prompt, schema_version <= 3)"
    if min(n1, n0) < 2:
        method += " (fewer than 2 prompts: no interval)"
    se = math.hypot(se1, se0) if se1 is not None and se0 is not None else None
    return _row("accuracy", "rate", p1, p0, clustered_delta(p1, se1, p0, se0), (n1, n0), method, se=se)


def _row(
    label: str,
    kind: Literal["rate", "mean"],
    cur: float,
    base: float,
    delta_ci: tuple[float, Any, Any],
    ns: tuple[int, int],
    method: str,
    lower_is_better: bool = False,
    *,
    se: float | None = None,
    p_value: float | None = None,
    detectable: float | None = None,
    significant: bool | None = None,
) -> ComparisonRow:
    """The row; its SE is read off a symmetric-ish CI where not given ((high - low) / 2z), and the smallest
    detectable change is (z_0.975 + z_0.8) SE. `significant` (McNemar's test) replaces "the CI excludes 0"."""
    delta, low, high = delta_ci
    if se is None and low is not None and high is not None:
        se = (high - low) / (2 * Z_95)
    if detectable is None and se:  # an SE of 0 (no difference seen) tells nothing of power
        detectable = (Z_95 + Z_80) * se
    if significant is None:
        significant = (low is not None and low > 0) or (high is not None and high < 0)
    worse, better = (delta > 0 and significant), (delta < 0 and significant)
    if not lower_is_better:
        worse, better = better, worse
    return ComparisonRow(
        label=label,
        kind=kind,
        method=method,
        current=cur,
        baseline=base,
        delta=delta,
        low=low,
        high=high,
        n_current=ns[0],
        n_baseline=ns[1],
        regression=bool(worse),
        improvement=bool(better),
        se=se,
        p_value=p_value,
        detectable=detectable,
    )


def compare_benchmark(
    cur: BenchmarkMetrics, base: BenchmarkMetrics, matched: Matched | None = None, *, paired: bool = True
) -> dict[str, ComparisonRow]:
    """Every headline metric both runs have, keyed by metric name (accuracy, pass@1, pass@n, ...); accuracy and
    pass@k paired over the shared prompts where both documents have per-prompt rows (`matched`, found here when
    not given), unless `paired` is false (the independent comparison, e.g. to show what pairing gained)."""
    if not paired:
        matched = None
    elif matched is None:
        matched = match_prompts(cur, base)
    out: dict[str, ComparisonRow] = {}
    accuracy = accuracy_row(cur, base, matched)
    if accuracy is not None:
        out["accuracy"] = accuracy
    for name, label, (p1, n1), (p0, n0) in _rates(cur, base):
        if p1 is None or p0 is None:
            continue
        pd = _paired_rate(matched, name, label) if matched is not None else None
        if matched is not None and pd is not None:
            out[name] = _paired_row(label, pd, matched)
        else:
            out[name] = _row(label, "rate", p1, p0, rate_delta(p1, n1, p0, n0), (n1, n0), "newcombe")
    m1, m0 = cur.mean_reward, base.mean_reward
    if m1 is not None and m0 is not None:
        c1, c0 = cur.ci.mean_reward, base.ci.mean_reward
        delta_ci = _combine(m1, c1.low, c1.high, m0, c0.low, c0.high)
        ns = (cur.n_prompts, base.n_prompts)
        out["mean_reward"] = _row("mean reward", "mean", m1, m0, delta_ci, ns, "bootstrap-prompts")
    r1, r0 = cur.reasoning, base.reasoning
    if (
        r1 is not None
        and r0 is not None
        and r1.ended_in_reasoning_rate is not None
        and r0.ended_in_reasoning_rate is not None
    ):
        p1, p0, ns = r1.ended_in_reasoning_rate, r0.ended_in_reasoning_rate, (cur.n_rollouts, base.n_rollouts)
        delta_ci = rate_delta(p1, ns[0], p0, ns[1])
        out["ended_in_reasoning"] = _row(
            "truncated while reasoning", "rate", p1, p0, delta_ci, ns, "newcombe", lower_is_better=True
        )
    return out


def _run_summary(info: RunInfo | None, report: str | None = None) -> RunSummary | None:
    if info is None:
        return None
    return RunSummary(
        run_id=info.run_id,
        run_name=info.run_name,
        deployment=info.deployment,
        model=info.model,
        model_fingerprint=info.model_fingerprint,
        finished_at=info.finished_at,
        report=report,
    )


def compare(
    current: RunMetrics,
    baseline: RunMetrics,
    current_info: RunInfo | None = None,
    baseline_info: RunInfo | None = None,
    baseline_report: str | None = None,
) -> Comparison:
    """Compare two runs' metrics: per benchmark both have, a row per headline metric (label, kind, method: how
    the CI was made, see the module docstring; current, baseline, delta and its 95% CI low/high; n_current,
    n_baseline: prompts for accuracy, pass@k, maj@k and mean reward, rollouts for env rates and a Newcombe
    accuracy; regression, improvement), the flagged rows listed, and the benchmarks only one run has.
    `baseline_report` is the baseline's report path, relative to the store root."""
    cur_b, base_b = current.benchmarks, baseline.benchmarks
    matched = {name: match_prompts(cur_b[name], base_b[name]) for name in cur_b if name in base_b}
    benchmarks = {name: compare_benchmark(cur_b[name], base_b[name], m) for name, m in matched.items()}
    flagged = [(name, row) for name, rows in benchmarks.items() for row in rows.values()]
    return Comparison(
        level=CI_LEVEL,
        current=_run_summary(current_info),
        baseline=_run_summary(baseline_info, baseline_report),
        benchmarks=benchmarks,
        pairing={name: m.pairing() for name, m in matched.items() if m is not None},
        regressions=[f"{name}: {row.label}" for name, row in flagged if row.regression],
        improvements=[f"{name}: {row.label}" for name, row in flagged if row.improvement],
        missing=Missing(current_only=sorted(set(cur_b) - set(base_b)), baseline_only=sorted(set(base_b) - set(cur_b))),
    )


# ---------------------------------------------------------------------------------------------
# Finding the baseline among the run index's entries


def find_baseline(
    entries: Iterable[IndexEntry],
    deployment: str | None,
    benchmarks: Iterable[str],
    exclude_run_id: str | None,
    *,
    run_name: str | None = None,
    run_id: str | None = None,
) -> IndexEntry | None:
    """The index entry to compare with, from `entries` newest first (as the run index lists them):
    `run_id` when given; else the latest run of the same deployment (or, for a run outside any
    deployment, the latest one outside a deployment with the same run_name) whose benchmarks include
    all of `benchmarks`. None when nothing matches (runs with neither a deployment nor a run name
    have no automatic baseline). A run that did not complete (failed, or with rollouts missing) is never
    a baseline, not even when named."""
    others = [e for e in entries if e.run_id != exclude_run_id and e.status == "complete"]
    if run_id is not None:
        return next((e for e in others if e.run_id == run_id), None)
    if deployment:
        candidates = [e for e in others if e.deployment == deployment]
    elif run_name:
        candidates = [e for e in others if not e.deployment and e.run_name == run_name]
    else:
        return None
    needed = set(benchmarks)
    return next((e for e in candidates if needed <= set(e.benchmarks)), None)


def load_run_record(store: Store, entry: IndexEntry) -> RunRecord:
    """A run's record (older schema versions migrated), from the metrics.json its index entry names."""
    relative = entry.metrics or f"runs/{entry.run_id}/metrics.json"
    url = relative if "://" in relative else store.path(*relative.split("/"))
    try:
        data = json.loads(store.read_text(url))
    except FileNotFoundError as exc:
        raise StoreError(f"the baseline's metrics are missing: {url}") from exc
    return RunRecord.model_validate(data)


def baseline_comparison(
    store: Store,
    metrics: RunMetrics,
    run_info: RunInfo,
    entries: Iterable[IndexEntry],
    baseline_run_id: str | None = None,
) -> Comparison | None:
    """Find the baseline among the run index's `entries` (see find_baseline), load its metrics and
    compare; None when there is none.

    A missing or unreadable baseline never fails the run that asked: it is logged and skipped.
    """
    entries = list(entries)
    entry = find_baseline(
        entries,
        run_info.deployment,
        list(metrics.benchmarks),
        run_info.run_id,
        run_name=run_info.run_name,
        run_id=baseline_run_id,
    )
    if entry is None:
        if baseline_run_id:
            named = next((e for e in entries if e.run_id == baseline_run_id), None)
            why = "did not complete, so it is not a baseline" if named else f"is not in the index of {store.url}"
            logger.warning("baseline run %s %s", baseline_run_id, why)
        return None
    try:
        baseline = load_run_record(store, entry)
    except (StoreError, OSError, ValueError, KeyError) as exc:
        logger.warning("no baseline comparison: %s", exc)
        return None
    return compare(metrics, baseline, run_info, baseline.run_info, entry.report)
