"""`evalflow run`: one evaluation in this process (the `eval` flow), or its plan with `--dry-run`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import fail

if TYPE_CHECKING:
    from core.config import EvalConfig
    from core.record import RunPlan

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
        resolved = resolve_config(config, overrides or [])  # a bad file, override or field: a ConfigError
    except (ValueError, OSError) as exc:
        fail("invalid configuration", exc)

    if dry_run:
        plan = _plan(resolved, dry_run=True)
        typer.echo(json.dumps(plan.model_dump(mode="json"), indent=2))
        return
    from ops.api import started_api

    # A SIGTERM (`kill`, a cancelled deployment run) unwinds through `finally`: the server is stopped.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    # the temporary API (seconds to start) starts first and comes up while the pipeline is imported and planned
    with started_api() as api:
        _plan(resolved, dry_run=False)
        from flows.eval import eval_flow

        # The flow logs the summary table. What the plan could not see (a conversion that fails) and a run
        # that ends Failed (logged by the flow with its report) are EvalflowErrors: the `evalflow` group
        # prints their one line (`checkpoint error: ...`, `run failed: ...`) and exits 2, or 1 for a run.
        with api.serving() if api else contextlib.nullcontext():
            result = asyncio.run(eval_flow(resolved))
    assert result.collection is not None  # the flow's record of a run always says where its reports are
    for kind, url in result.collection.reports.items():
        typer.echo(f"{kind}: {url}")


def _plan(resolved: EvalConfig, dry_run: bool) -> RunPlan:
    """The run's plan; bad data, model, store or endpoint fail here, in seconds, before the Prefect engine starts."""
    from flows.plan import plan_run

    try:
        return plan_run(resolved, probe=not dry_run)
    except (ValueError, OSError) as exc:  # evalflow's own say their kind (a DatasetError: `dataset error: ...`)
        fail("dry run" if dry_run else "cannot start the run", exc)
