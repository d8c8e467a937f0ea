"""`evalflow compare RUN [BASELINE]`: two recorded runs of a store compared (paired where they share prompts) and
gated. No server, no Prefect: both runs' metrics.json are read through the run index.

A run that did not complete is no result: it is compared with nothing and is nobody's baseline. Without BASELINE
the baseline is the one the run's own report used: the latest complete run of the same deployment (or run name)
that finished before it and covers its benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.gate_config import GateConfig
from core.record import Comparison, IndexEntry, RunRecord
from core.store import Store
from errors import EvalflowError
from tasks.analysis.compare import compare, find_baseline, load_run_record
from tasks.analysis.gate import gate
from tasks.reporting.index import read_entries


class CompareError(EvalflowError, ValueError):
    """The runs named cannot be compared: not in the store's index, not complete, or no baseline found."""

    kind = "config"


@dataclass(frozen=True)
class Compared:
    comparison: Comparison  # with the gate's verdict
    current: IndexEntry
    baseline: IndexEntry


def _entry(entries: list[IndexEntry], run_id: str, store: Store, role: str) -> IndexEntry:
    entry = next((e for e in entries if e.run_id == run_id), None)
    if entry is None:
        known = ", ".join(e.run_id for e in entries[:5]) or "none"
        raise CompareError(
            f"{role} {run_id!r} is not in the run index of {store.url} (latest runs: {known}); give --store"
        )
    if entry.status != "complete":
        raise CompareError(
            f"{role} {run_id!r} is {entry.status}, not complete: a run that did not complete is no result"
        )
    return entry


def gate_config(record: RunRecord, overrides: dict[str, Any]) -> GateConfig:
    """The run's own `gate:` settings (its recorded config), the command's options replacing their top-level fields
    (per-benchmark rules stay)."""
    recorded = record.run_info.config.get("gate")
    base = recorded if isinstance(recorded, dict) else {}
    try:
        return GateConfig.model_validate({**base, **{k: v for k, v in overrides.items() if v is not None}})
    except ValueError as exc:
        raise CompareError(f"gate: {' '.join(str(exc).split())}") from exc


def compare_runs(
    store: Store, run_id: str, baseline_id: str | None = None, gate_overrides: dict[str, Any] | None = None
) -> Compared:
    """Compare run `run_id` of `store` with `baseline_id` (default: its automatic baseline) and gate the result."""
    entries = read_entries(store)  # newest first
    current = _entry(entries, run_id, store, "run")
    if baseline_id is not None:
        if baseline_id == run_id:
            raise CompareError(f"baseline {baseline_id!r} is the run itself: name another run")
        baseline = _entry(entries, baseline_id, store, "baseline")
    else:
        earlier = entries[entries.index(current) + 1 :]
        found = find_baseline(earlier, current.deployment, current.benchmarks, run_id, run_name=current.run_name)
        if found is None:
            group = f"deployment {current.deployment!r}" if current.deployment else f"run name {current.run_name!r}"
            raise CompareError(
                f"no baseline for run {run_id!r}: no earlier complete run of {group} covers its benchmarks "
                f"({', '.join(current.benchmarks)}); name one as BASELINE"
            )
        baseline = found
    record, base_record = load_run_record(store, current), load_run_record(store, baseline)
    comparison = compare(record, base_record, record.run_info, base_record.run_info, baseline.report)
    verdict = gate(comparison, gate_config(record, gate_overrides or {}))
    return Compared(comparison.model_copy(update={"gate": verdict}), current, baseline)
