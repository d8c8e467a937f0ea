"""`evalflow sweep`: a grid of config values, one `eval` run per point, and a report side by side."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer
import yaml

from cli.common import fail
from cli.run import OVERRIDES_HELP


def sweep(
    sweep_file: Annotated[
        str, typer.Option("--sweep", help="YAML with `grid:` (dotted keys to lists of values)", show_default=False)
    ],
    overrides: Annotated[list[str] | None, typer.Argument(help=OVERRIDES_HELP, show_default=False)] = None,
    config: Annotated[
        str | None, typer.Option("--config", help="the base EvalConfig YAML (default: the sweep file's `base:`)")
    ] = None,
    deployment: Annotated[
        str | None, typer.Option("--deployment", help="the eval deployment per point (default: the sweep file's)")
    ] = None,
    local: Annotated[bool, typer.Option("--local", help="run the points in this process, no deployment")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print each point and what it would run (one JSON line per point)")
    ] = False,
) -> None:
    """Run a sweep: every point is validated and the model prepared once before any point starts.

    Points run through the eval deployment (default `eval/smoke`, spread over its workers), or one
    after another in this process with --local (or `deployment: null` in the sweep file).
    """
    # Prefect and the pipeline take seconds to import: only commands that run them pay for it.
    from core.config import EvalConfig
    from core.overrides import resolve_config
    from core.sweep_record import SweepResult
    from flows.plan import plan_run
    from flows.sweep import expand_grid, load_sweep, sweep_flow

    # A bad sweep file, override, field or grid key is a ConfigError (a point's missing dataset a DatasetError):
    # its one line says its kind, `config error: ...` (cli.common.fail); other errors say `invalid sweep: ...`.
    try:
        spec, base = load_sweep(sweep_file, config)
        base_config = resolve_config(base, overrides or [])
        points = expand_grid(base_config, spec.grid)
    except (ValueError, OSError, yaml.YAMLError) as exc:  # an unreadable sweep file
        fail("invalid sweep", exc)
    if dry_run:
        try:
            for values, data in points:
                plan = plan_run(EvalConfig.model_validate(data))
                typer.echo(
                    json.dumps(
                        {"values": values, "rollouts": plan.rollouts.model_dump(), "model": plan.model}, default=str
                    )
                )
        except ValueError as exc:
            fail("dry run", exc)
        return
    target = None if local else (deployment or spec.deployment)
    result = asyncio.run(sweep_flow(base_config, spec.grid, deployment=target, name=spec.name))
    assert isinstance(result, SweepResult)  # a sweep that runs (not a dry run) returns its record
    typer.echo(f"sweep report: {result.reports['html']}")
