"""The sweep record: what a sweep was (`SweepInfo`), how each grid point went (`SweepPoint`), sweep.json
(`SweepRecord`: the info and its points) and what the sweep flow returns (`SweepResult`: the record and
its report URLs; `SweepPlan` for a dry run). Written by flows.sweep, rendered by tasks.reporting.sweep.

A point's grid values are arbitrary JSON (whatever the grid lists), its headline is its run's index entry
headline (per benchmark, open keys: core.record.IndexEntry); everything else is declared, and every model
forbids unknown keys.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from core.record import RunPlan


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SweepInfo(_Record):
    """A sweep's identity: its grid (dotted config keys to the values tried), where its points ran, when."""

    sweep_id: str
    name: str | None = None
    deployment: str | None = None  # the eval deployment the points ran through; None: in the sweep's process
    grid: dict[str, list[Any]]
    flow_run_id: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    model_fingerprints: list[str] = Field(default_factory=list)  # the models the sweep prepared once


class SweepPoint(_Record):
    """One grid point: its values, its child run's final state (a Prefect state name) and, once the run is
    found in the store's index, its run id, headline and report (relative to the store root)."""

    index: int
    values: dict[str, Any]  # grid key -> this point's value
    state: str
    message: str | None = None  # why the child run did not complete
    run_id: str | None = None
    flow_run_id: str | None = None
    headline: dict[str, dict[str, JsonValue]] = Field(default_factory=dict)
    report: str | None = None


class SweepRecord(SweepInfo):
    """sweep.json: the sweep and its points, in grid order."""

    points: list[SweepPoint] = Field(default_factory=list)


class SweepResult(SweepRecord):
    """What the sweep flow returns: the record, and the URLs of its files (json, markdown, html)."""

    reports: dict[str, str] = Field(default_factory=dict)


class PointPlan(RunPlan):
    """One grid point's dry run: its values and what its run would do."""

    values: dict[str, Any]  # grid key -> this point's value


class SweepPlan(_Record):
    """A dry run's answer: each point's values and what it would run (flows.plan.plan_run)."""

    points: int
    deployment: str | None = None
    plans: list[PointPlan] = Field(default_factory=list)
