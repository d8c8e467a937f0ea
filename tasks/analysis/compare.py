"""Compare a run with a baseline run: per benchmark, each headline metric's delta with a 95% CI.

Why these intervals (no resampling of either run is needed; both come from the metrics dicts):

- Rates (accuracy, pass@k, maj@k, strict/flexible) use Newcombe's hybrid score interval for a
  difference of proportions: with Wilson intervals [l1, u1] around the current rate p1 and [l0, u0]
  around the baseline rate p0, the delta d = p1 - p0 has
  ``[d - sqrt((p1 - l1)^2 + (u0 - p0)^2), d + sqrt((u1 - p1)^2 + (p0 - l0)^2)]``. It is the normal
  approximation of the difference, built from score intervals, so it stays sensible at 0% or 100%
  where the plain Wald interval collapses to a point. n is the rate's own denominator (rollouts for
  accuracy and the info rates, prompts for pass@k/maj@k: see tasks/analysis/metrics.py).
- Mean reward combines the two runs' prompt-level bootstrap CIs the same way: each side's
  half-width (below and above its mean) is added in quadrature. Runs without a bootstrap CI
  (fewer than 2 prompts, or a schema-1 baseline) get no interval and are never flagged.

``regression`` is true when the metric dropped and the delta's CI lies entirely below 0;
``improvement`` the mirror image. Metrics of benchmarks present in only one run are listed under
``missing``. pass@n/maj@n compare the largest k both runs report (the label says which k).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any

from core import store
from tasks.analysis.metrics import CI_LEVEL, wilson_interval

logger = logging.getLogger(__name__)

Entry = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# Intervals


def rate_delta(p1: float, n1: int, p0: float, n0: int) -> tuple[float, float | None, float | None]:
    """(delta, low, high) of p1 - p0 by Newcombe's hybrid score method (Wilson intervals combined)."""
    l1, u1 = wilson_interval(p1, n1)
    l0, u0 = wilson_interval(p0, n0)
    return _combine(p1, l1, u1, p0, l0, u0)


def _combine(
    x1: float, l1: float | None, u1: float | None, x0: float, l0: float | None, u0: float | None
) -> tuple[float, float | None, float | None]:
    delta = x1 - x0
    if None in (l1, u1, l0, u0):
        return delta, None, None
    low = delta - math.hypot(x1 - l1, u0 - x0)  # type: ignore[operator]
    high = delta + math.hypot(u1 - x1, x0 - l0)  # type: ignore[operator]
    return delta, low, high


# ---------------------------------------------------------------------------------------------
# Which numbers to compare


def _largest_common_k(cur: dict[str, Any], base: dict[str, Any], key: str) -> str | None:
    common = {k for k, v in cur.get(key, {}).items() if v is not None} & {
        k for k, v in base.get(key, {}).items() if v is not None
    }
    return max(common, key=int) if common else None


def _ci_n(bm: dict[str, Any], path: Iterable[str], default: int) -> int:
    node: Any = bm.get("ci", {})
    for part in path:
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return int(node.get("n", default)) if isinstance(node, dict) and node.get("n") is not None else default


def _rate_stats(bm: dict[str, Any], metric: str, k: str | None) -> tuple[float | None, int]:
    """(rate, denominator) of a headline rate; older metrics without a `ci` block fall back to counts."""
    if metric == "accuracy":
        return bm.get("accuracy"), int(bm.get("n_rollouts", 0))
    if metric in ("pass_at_k", "maj_at_k"):
        return bm.get(metric, {}).get(k), _ci_n(bm, (metric, str(k)), int(bm.get("n_prompts", 0)))
    key = {"strict": "strict_correct", "flexible": "flexible_correct"}[metric]
    return bm.get("info_rates", {}).get(key), _ci_n(bm, ("info_rates", key), int(bm.get("n_rollouts", 0)))


def _row(label: str, kind: str, cur: float, base: float, delta_ci: tuple[float, Any, Any], ns: tuple[int, int]) -> dict:
    delta, low, high = delta_ci
    return {
        "label": label,
        "kind": kind,
        "current": cur,
        "baseline": base,
        "delta": delta,
        "low": low,
        "high": high,
        "n_current": ns[0],
        "n_baseline": ns[1],
        "regression": bool(delta < 0 and high is not None and high < 0),
        "improvement": bool(delta > 0 and low is not None and low > 0),
    }


def compare_benchmark(cur: dict[str, Any], base: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every headline metric both runs have, keyed by metric name (accuracy, pass@1, pass@n, ...)."""
    out: dict[str, dict[str, Any]] = {}
    wanted: list[tuple[str, str, str | None, str]] = [("accuracy", "accuracy", None, "accuracy")]
    if cur.get("pass_at_k", {}).get("1") is not None and base.get("pass_at_k", {}).get("1") is not None:
        wanted.append(("pass@1", "pass_at_k", "1", "pass@1"))
    for name, key in (("pass@n", "pass_at_k"), ("maj@n", "maj_at_k")):
        k = _largest_common_k(cur, base, key)
        if k is not None and not (key == "pass_at_k" and k == "1"):
            wanted.append((name, key, k, f"{name[:-2]}@{k}"))
    wanted += [(m, m, None, m) for m in ("strict", "flexible")]
    for name, metric, k, label in wanted:
        p1, n1 = _rate_stats(cur, metric, k)
        p0, n0 = _rate_stats(base, metric, k)
        if p1 is None or p0 is None:
            continue
        out[name] = _row(label, "rate", p1, p0, rate_delta(p1, n1, p0, n0), (n1, n0))
    m1, m0 = cur.get("mean_reward"), base.get("mean_reward")
    if m1 is not None and m0 is not None:
        c1 = cur.get("ci", {}).get("mean_reward", {})
        c0 = base.get("ci", {}).get("mean_reward", {})
        delta_ci = _combine(m1, c1.get("low"), c1.get("high"), m0, c0.get("low"), c0.get("high"))
        ns = (int(cur.get("n_prompts", 0)), int(base.get("n_prompts", 0)))
        out["mean_reward"] = _row("mean reward", "mean", m1, m0, delta_ci, ns)
    return out


def _run_summary(info: dict[str, Any] | None) -> dict[str, Any] | None:
    if not info:
        return None
    keys = ("run_id", "run_name", "deployment", "model", "model_fingerprint", "finished_at", "report")
    return {k: info.get(k) for k in keys if k in info}


def compare(current: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """Compare two metrics dicts (as compute_metrics returns, or metrics.json with its run_info).

    Returns ``{"level", "current", "baseline", "benchmarks": {name: {metric: row}}, "regressions",
    "improvements", "missing": {"current_only", "baseline_only"}}`` where each row holds label, kind
    (rate|mean), current, baseline, delta, low, high (the delta's 95% CI), n_current, n_baseline,
    regression and improvement.
    """
    cur_b, base_b = current.get("benchmarks", {}), baseline.get("benchmarks", {})
    benchmarks = {name: compare_benchmark(cur_b[name], base_b[name]) for name in cur_b if name in base_b}
    flagged = [(name, row) for name, rows in benchmarks.items() for row in rows.values()]
    return {
        "level": CI_LEVEL,
        "current": _run_summary(current.get("run_info")),
        "baseline": _run_summary(baseline.get("run_info")),
        "benchmarks": benchmarks,
        "regressions": [f"{name}: {row['label']}" for name, row in flagged if row["regression"]],
        "improvements": [f"{name}: {row['label']}" for name, row in flagged if row["improvement"]],
        "missing": {
            "current_only": sorted(set(cur_b) - set(base_b)),
            "baseline_only": sorted(set(base_b) - set(cur_b)),
        },
    }


# ---------------------------------------------------------------------------------------------
# Finding the baseline in the run index


def find_baseline(
    store_url: str,
    storage_options: dict[str, Any] | None,
    deployment: str | None,
    benchmarks: Iterable[str],
    exclude_run_id: str | None,
    *,
    run_name: str | None = None,
    run_id: str | None = None,
) -> Entry | None:
    """The index entry to compare with: `run_id` when given; else the latest run of the same
    deployment (or, for a run outside any deployment, the latest one outside a deployment with the
    same run_name) whose benchmarks include all of `benchmarks`. None when nothing matches (runs
    with neither a deployment nor a run name have no automatic baseline)."""
    from tasks.reporting.index import read_index, run_time

    entries = [e for e in read_index(store_url, storage_options) if e.get("run_id") != exclude_run_id]
    if run_id is not None:
        return next((e for e in entries if e.get("run_id") == run_id), None)
    if deployment:
        candidates = [e for e in entries if e.get("deployment") == deployment]
    elif run_name:
        candidates = [e for e in entries if not e.get("deployment") and e.get("run_name") == run_name]
    else:
        return None
    needed = set(benchmarks)
    candidates = [e for e in candidates if needed <= set(e.get("benchmarks") or [])]
    return max(candidates, key=run_time, default=None)


def load_run_metrics(store_url: str, entry: Entry, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """A run's metrics.json (metrics plus run_info), located through its index entry."""
    import json

    relative = entry.get("metrics") or f"runs/{entry['run_id']}/metrics.json"
    url = relative if "://" in relative else store.join(store_url, *relative.split("/"))
    try:
        data = json.loads(store.read_text(url, storage_options))
    except FileNotFoundError as exc:
        raise store.StoreError(f"the baseline's metrics are missing: {url}") from exc
    info = {**data.get("run_info", {}), "report": entry.get("report")}
    return {**data, "run_info": info}


def baseline_comparison(
    store_url: str,
    metrics: dict[str, Any],
    run_info: dict[str, Any],
    storage_options: dict[str, Any] | None = None,
    baseline_run_id: str | None = None,
) -> dict[str, Any] | None:
    """Find the baseline (see find_baseline), load its metrics and compare; None when there is none.

    A missing or unreadable baseline never fails the run that asked: it is logged and skipped.
    """
    try:
        entry = find_baseline(
            store_url,
            storage_options,
            run_info.get("deployment"),
            list(metrics.get("benchmarks", {})),
            run_info.get("run_id"),
            run_name=run_info.get("run_name"),
            run_id=baseline_run_id,
        )
        if entry is None:
            if baseline_run_id:
                logger.warning("baseline run %s is not in the index of %s", baseline_run_id, store_url)
            return None
        baseline = load_run_metrics(store_url, entry, storage_options)
    except (store.StoreError, OSError, ValueError, KeyError) as exc:
        logger.warning("no baseline comparison: %s", exc)
        return None
    current = {**metrics, "run_info": {**run_info, **metrics.get("run_info", {})}}
    return compare(current, baseline)
