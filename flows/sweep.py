"""The `sweep` flow: one base EvalConfig, a grid of dotted keys to lists of values, one child `eval`
run per point of the cartesian product, and a report that puts the points side by side.

    evalflow sweep --config configs/demo.yaml --sweep sweeps/temperature.yaml [--dry-run] [--local]

The sweep file holds `grid:` (e.g. `sampling.temperature: [0.6, 0.8]`), optionally `base:` (the
config it was written for; it must match `--config`) and `deployment:` (default `eval/smoke`). Each
point runs through that deployment, so points spread over its workers; with `--local` (or
`deployment: null`) they run in this process, one after another. Every point is validated and the
model is prepared once (converted, cached by content) before any child run starts.

No `from __future__ import annotations`: deployments validate parameters against the signature.
"""

import asyncio
import itertools
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from prefect import flow
from prefect.context import FlowRunContext
from prefect.deployments import arun_deployment
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.config import EvalConfig
from core.logs import get_logger
from core.overrides import has_path, set_path
from core.resolve import resolve
from core.store import Store
from core.sweep_record import PointPlan, SweepPlan, SweepPoint, SweepRecord, SweepResult
from envs.registry import get_env
from errors import ConfigError
from flows.eval import eval_flow
from flows.plan import plan_run
from tasks.checkpoints.prepare import prepare_model
from tasks.reporting.index import read_entries
from tasks.reporting.sweep import write_sweep_report

DEFAULT_DEPLOYMENT = "eval/smoke"


class SweepError(ConfigError):
    """A sweep that cannot run as written: found before any child run starts."""


class SweepFile(BaseModel):
    """A sweep file: the grid, and what it was written for."""

    model_config = ConfigDict(extra="forbid")
    base: str | None = Field(default=None, description="the base config file the grid applies to")
    deployment: str | None = Field(default=DEFAULT_DEPLOYMENT, description="the eval deployment that runs each point")
    name: str | None = None
    grid: dict[str, list[Any]]


def _env_option(full: dict[str, Any], key: str) -> bool:
    """`benchmarks.N.options.NAME`: environment options are free-form, checked by the environment."""
    parts = key.split(".")
    return (
        len(parts) == 4 and parts[0] == "benchmarks" and parts[2] == "options" and has_path(full, ".".join(parts[:3]))
    )


def expand_grid(config: EvalConfig, grid: dict[str, list[Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every point of the grid as (its grid values, the child's config data), each validated.

    The child's data holds only what the base config set plus the point's values (`exclude_unset`),
    so blocks named in the base still provide the defaults in every child.
    """
    if not grid:
        raise SweepError("the sweep grid is empty: give at least one key with a list of values")
    full = config.model_dump(mode="json")
    for key, values in grid.items():
        if not has_path(full, key) and not _env_option(full, key):
            raise SweepError(f"grid key {key!r} is not a field of the config (check the spelling and the list index)")
        if not isinstance(values, list) or not values:
            raise SweepError(f"grid key {key!r}: give a non-empty list of values, got {values!r}")
    if "api_key" in config.server.model_fields_set:
        raise SweepError("server.api_key is set in the config: put it in a server block (server.block), so sweep "
                         "points do not carry the key as a plain flow-run parameter")  # fmt: skip
    base = config.model_dump(mode="json", exclude_unset=True)
    points = []
    for combo in itertools.product(*grid.values()):
        values = dict(zip(grid, combo, strict=True))
        data = json.loads(json.dumps(base))
        for key, value in values.items():
            set_path(data, key, value)
        try:
            for bench in EvalConfig.model_validate(data).benchmarks:
                get_env(bench.env_ref, **bench.options)  # option names and values, checked by the environment
        except (ValidationError, ValueError, TypeError) as exc:
            raise SweepError(f"sweep point {values}: invalid config:\n{exc}") from exc
        points.append((values, data))
    return points


def _prepare_once(points: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    """Convert each distinct model of the sweep once, before the children (which then hit the cache)."""
    prepared: dict[str, str] = {}
    for _, data in points:
        cfg = resolve(EvalConfig.model_validate(data)).config
        if cfg.server.mode != "managed":
            continue
        ident = json.dumps([cfg.model.model_dump(mode="json"), cfg.server.runtime], sort_keys=True)
        if ident not in prepared:
            prepared[ident] = prepare_model(cfg.model, cfg.server.runtime).fingerprint
    return list(prepared.values())


async def _run_child(
    deployment: str | None, sweep_id: str, index: int, values: dict[str, Any], data: dict[str, Any]
) -> SweepPoint:
    """One point as a child flow run; its outcome (state, run id or flow run id) for the sweep report."""
    name = f"{sweep_id}-p{index}"
    if deployment is None:
        result = await eval_flow.with_options(flow_run_name=name)(EvalConfig.model_validate(data))
        return SweepPoint(index=index, values=values, state="Completed", run_id=result.run_info.run_id)
    # Keyed by this sweep run's attempt and the point: a request the client retries (a slow server under load)
    # returns the child it already created instead of starting the point twice.
    ctx = FlowRunContext.get()
    key = f"{ctx.flow_run.id}-{ctx.flow_run.run_count}-p{index}" if ctx and ctx.flow_run else None
    run = await arun_deployment(
        deployment, parameters={"config": data}, flow_run_name=name, timeout=None, idempotency_key=key
    )
    state = run.state
    return SweepPoint(
        index=index,
        values=values,
        state=(state and state.name) or "?",
        message=state.message if state and not state.is_completed() else None,
        flow_run_id=str(run.id),
    )


def _attach_runs(points: list[SweepPoint], store: Store) -> list[SweepPoint]:
    """Each point with its run in the store index (found by flow run id, or run id): run id, headline, report."""
    entries = read_entries(store)
    by_flow_run = {e.flow_run_id: e for e in entries if e.flow_run_id}
    by_run = {e.run_id: e for e in entries}
    attached = []
    for point in points:
        entry = by_flow_run.get(point.flow_run_id or "") or by_run.get(point.run_id or "")
        if entry:
            found = {"run_id": entry.run_id, "headline": entry.headline, "report": entry.report}
            point = point.model_copy(update=found)
        attached.append(point)
    return attached


@flow(name="sweep", log_prints=True)
async def sweep_flow(
    config: EvalConfig,
    grid: dict[str, list[Any]],
    deployment: str | None = DEFAULT_DEPLOYMENT,
    name: str | None = None,
    dry_run: bool = False,
) -> SweepResult | SweepPlan:
    """Run `config` at every point of `grid` (dotted keys to lists), each as a child `eval` run
    through `deployment` (None: in this process), and write a report comparing the points. Returns the
    sweep's record and its report URLs (a dry run: each point's plan, starting nothing)."""
    logger = get_logger()
    points = expand_grid(config, grid)
    resolved = resolve(config)  # a missing block fails here, before anything starts
    logger.info("sweep over %s: %d points via %s", ", ".join(grid), len(points), deployment or "this process")
    if dry_run:
        plans = [PointPlan(values=v, **dict(plan_run(EvalConfig.model_validate(d)))) for v, d in points]
        summary = SweepPlan(points=len(points), deployment=deployment, plans=plans)
        logger.info("dry run:\n%s", json.dumps(summary.model_dump(), indent=2, default=str))
        return summary
    sweep_id = f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    started = datetime.now(UTC)
    fingerprints = _prepare_once(points)
    logger.info("sweep %s: model(s) prepared once (%s); starting %d child runs", sweep_id, fingerprints, len(points))
    children = [_run_child(deployment, sweep_id, i, values, data) for i, (values, data) in enumerate(points)]
    if deployment:  # the workers run the points side by side
        outcomes = await asyncio.gather(*children, return_exceptions=True)
    else:  # in this process: one server at a time
        outcomes = []
        for child in children:
            try:
                outcomes.append(await child)
            except Exception as exc:  # a failed point is reported; the others still run
                outcomes.append(exc)
    results: list[SweepPoint] = []
    for i, ((values, _), outcome) in enumerate(zip(points, outcomes, strict=True)):
        if isinstance(outcome, BaseException):
            outcome = SweepPoint(index=i, values=values, state="Failed", message=repr(outcome))
        results.append(outcome)
    results = _attach_runs(results, resolved.store)
    ctx = FlowRunContext.get()
    record = SweepRecord(
        sweep_id=sweep_id,
        name=name,
        deployment=deployment,
        grid=grid,
        flow_run_id=str(ctx.flow_run.id) if ctx and ctx.flow_run else None,
        started_at=started.isoformat(),
        finished_at=datetime.now(UTC).isoformat(),
        model_fingerprints=fingerprints,
        points=results,
    )
    urls = write_sweep_report(resolved.store, record)
    failed = [r for r in results if r.state != "Completed"]
    logger.info("sweep %s: %d/%d points completed; report %s", sweep_id, len(results) - len(failed), len(results),
                urls["html"])  # fmt: skip
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(results)} sweep points did not complete: "
                           + "; ".join(f"p{r.index} {r.values}: {r.state} {r.message or ''}"
                                       for r in failed))  # fmt: skip
    return SweepResult(**dict(record), reports=urls)


def load_sweep(sweep_path: str, config_path: str | None) -> tuple[SweepFile, str]:
    """The sweep file, and the base config path it runs on (checked against `--config`)."""
    try:
        spec = SweepFile.model_validate(yaml.safe_load(Path(sweep_path).read_text()) or {})
    except ValidationError as exc:
        raise SweepError(f"{sweep_path}: {exc}") from exc
    if spec.base and config_path and Path(spec.base).resolve() != Path(config_path).resolve():
        raise SweepError(
            f"{sweep_path} was written for base config {spec.base!r}, but --config is {config_path!r}: "
            "pass the same file (or drop `base:` from the sweep)"
        )
    base = config_path or spec.base
    if not base:
        raise SweepError(f"no base config: pass --config FILE or set `base:` in {sweep_path}")
    return spec, base
