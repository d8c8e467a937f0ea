"""`evalflow watch`: a training run's checkpoints evaluated as they land (the `watch` flow, polled)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Annotated

import typer

from cli.common import fail
from cli.run import CONFIG_HELP, OVERRIDES_HELP


def watch(
    overrides: Annotated[list[str] | None, typer.Argument(help=OVERRIDES_HELP, show_default=False)] = None,
    config: Annotated[str | None, typer.Option("--config", help=CONFIG_HELP)] = None,
    once: Annotated[bool, typer.Option("--once", help="one poll: evaluate the steps ready now, then exit")] = False,
    interval: Annotated[float, typer.Option("--interval", min=1.0, help="seconds between polls")] = 300.0,
) -> None:
    """Evaluate each ready checkpoint of a training run once (`model.source`: the run's folder or a pattern with
    {step}; `model.steps`: all, latest, every:K or a list), then poll every --interval seconds until
    interrupted. Steps already evaluated with this config are skipped, so a watcher stopped (or killed) and
    started again goes on where it was; the training-curve report is rewritten after each step."""
    from core.overrides import resolve_config

    try:
        resolved = resolve_config(config, overrides or [])
    except (ValueError, OSError) as exc:
        fail("invalid configuration", exc)
    if resolved.model.steps is None:
        resolved = resolved.model_copy(update={"model": resolved.model.model_copy(update={"steps": "all"})})
    from flows.watch import watch_flow
    from ops.api import started_api

    with started_api() as api, api.serving() if api else contextlib.nullcontext():
        while True:
            result = asyncio.run(watch_flow(resolved))
            for step in result.steps:
                typer.echo(
                    f"step {step.step}: {step.state}"
                    + (f" ({step.run_id or step.message})" if step.run_id or step.message else "")
                )
            if result.curve:
                typer.echo(f"curve: {result.curve.get('html')}")
            if once:
                return
            time.sleep(interval)
