"""`evalflow watch`: a training run's checkpoints evaluated as they land (the `watch` flow, polled here or by
the `eval/watch` deployment); `evalflow notify`: a trainer says a checkpoint is saved (a Prefect event)."""

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
    deploy: Annotated[
        bool,
        typer.Option(
            "--deploy",
            help="instead of polling here, create the deployment eval/NAME on the Prefect server (PREFECT_API_URL): "
            "a poll every --interval seconds on --pool's workers, and a run for each `evalflow notify` of this run",
        ),
    ] = False,
    name: Annotated[str, typer.Option("--name", help="with --deploy: the deployment's name")] = "watch",
    pool: Annotated[str, typer.Option("--pool", help="with --deploy: the work pool")] = "evalflow-gpu",
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
    if deploy:
        from ops.watch import deploy_watch

        done = deploy_watch(resolved, name, pool, interval)
        typer.echo(f"deployment {done.name} (training run {done.training_run}): every {interval:g} s on {pool}, "
                   f"and on each `evalflow notify` of a step\n{done.url}")  # fmt: skip
        return
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


def notify(
    step_path: Annotated[str, typer.Argument(help="the checkpoint just saved: a step_N/ or checkpoint-N/ folder")],
    run: Annotated[
        str | None,
        typer.Option("--run", help="the training run as the watcher's model.source names it (default: the parent)"),
    ] = None,
    training_run: Annotated[
        str | None, typer.Option("--training-run", help="the watcher's model.training_run, if it sets one")
    ] = None,
) -> None:
    """Tell the Prefect server (PREFECT_API_URL) that a checkpoint is saved: an `evalflow.checkpoint.saved` event,
    on which an `eval/watch` deployment of that training run evaluates the step at once, with no polling. The
    step must be complete (a half-written one is refused, exit 2). Call it from the trainer after each save."""
    from ops.watch import notify as send

    event_id = send(step_path, run, training_run)
    typer.echo(f"event evalflow.checkpoint.saved sent for {step_path} (id {event_id})")
