"""`evalflow run`: one evaluation in this process (the `eval` flow), or its plan with `--dry-run`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.common import fail

if TYPE_CHECKING:
    from core.config import EvalConfig

CONFIG_HELP = "YAML file with EvalConfig fields (default: all defaults)"
OVERRIDES_HELP = "dotted overrides, e.g. sampling.temperature=0.6 benchmarks.0.repeats=8"


def run(
    overrides: Annotated[list[str] | None, typer.Argument(help=OVERRIDES_HELP, show_default=False)] = None,
    config: Annotated[str | None, typer.Option("--config", help=CONFIG_HELP)] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print what would run (cache hits, rollouts) as JSON; start nothing")
    ] = False,
) -> None:
    """Evaluate a model: prepare it, start vLLM, collect the rollouts, analyse them, write the report.

    Without a Prefect server this runs on a temporary Prefect API; with PREFECT_API_URL set, the run
    shows up in that server's UI.
    """
    # Prefect and the pipeline take seconds to import: a bad config fails before they are imported.
    from core.overrides import resolve_config

    try:
        resolved = resolve_config(config, overrides or [])
    except (ValueError, OSError) as exc:  # pydantic's ValidationError is a ValueError
        fail("invalid configuration", exc)

    if dry_run:
        plan = _plan(resolved, dry_run=True)
        typer.echo(json.dumps(plan, indent=2, default=str))
        return
    from ops.api import started_api

    # A SIGTERM (`kill`, a cancelled deployment run) unwinds through `finally`: the server is stopped.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    # the temporary API (seconds to start) starts first and comes up while the pipeline is imported and planned
    with started_api() as api:
        _plan(resolved, dry_run=False)
        from flows.eval import INPUT_ERRORS, eval_flow
        from tasks.checkpoints.errors import CheckpointError
        from tasks.collection.failures import RunFailed

        try:
            with api.serving() if api else contextlib.nullcontext():
                result = asyncio.run(eval_flow(resolved))  # the flow logs the summary table
        except RunFailed as exc:  # logged by the flow with its report; the process says it failed
            typer.echo(f"run failed: {exc}", err=True)
            raise typer.Exit(1) from None
        except INPUT_ERRORS as exc:  # what the plan could not see (a conversion that fails): one line, as there
            fail("cannot prepare the model" if isinstance(exc, CheckpointError) else "cannot run", exc)
    for kind, url in result["reports"].items():
        typer.echo(f"{kind}: {url}")


def _plan(resolved: EvalConfig, dry_run: bool) -> dict[str, Any]:
    """The run's plan; bad data, model, store or endpoint fail here, in seconds, before the Prefect engine starts."""
    from core.resolve import BlockNotFound
    from core.store import StoreError
    from envs.base import DatasetError
    from flows.plan import plan_run
    from tasks.checkpoints.errors import CheckpointError

    checks = (CheckpointError, DatasetError, BlockNotFound, StoreError, ValueError, OSError)
    try:
        return plan_run(resolved, probe=not dry_run)
    except checks as exc:
        fail("dry run" if dry_run else "cannot start the run", exc)
