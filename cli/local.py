"""`evalflow local ...` and `evalflow demo`: a Prefect server, deployments and workers on this machine."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from ops import local as ops

app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode="markdown",
    help="A local Prefect server (127.0.0.1:4200, home .prefect/), its work pools, blocks, deployments and workers. "
    "With PREFECT_API_URL set, that server is used instead and none is started.",
)
# An operation that cannot go on raises OpsError: the `evalflow` group prints `ops error: MESSAGE` and exits 1.


@app.command()
def server() -> None:
    """Start the Prefect server in the background unless one answers (`prefect server start --background`)."""
    ops.server()


@app.command()
def deploy(
    force: Annotated[
        bool, typer.Option("--force", help="deploy even if nothing changed since the last deploy to this server")
    ] = False,
) -> None:
    """Create the work pools, save the blocks, and deploy everything in prefect.yaml (`prefect deploy --all`).

    Skipped when this server has every deployment and prefect.yaml and the code they are made from are unchanged
    since the last deploy from this checkout."""
    from ops.deploy import deploy as deploy_all

    deploy_all(force)


@app.command()
def blocks(
    overwrite: Annotated[bool, typer.Option("--overwrite", help="replace blocks that already exist")] = False,
) -> None:
    """Register the block types and save the defaults in blocks/defaults.yaml (kept if they exist).

    With EVALFLOW_STORE_URL set, the `runs` store block points there, with credentials from AWS_*.
    """
    ops.blocks(overwrite)


@app.command()
def worker(
    pool: Annotated[
        Literal["evalflow-cpu", "evalflow-gpu"], typer.Option(help="evalflow-gpu on GPU nodes")
    ] = "evalflow-cpu",
) -> None:
    """Start a process worker for a work pool in the background (log in .prefect/worker-POOL.log)."""
    ops.worker(pool)


@app.command()
def slots(
    register: Annotated[bool, typer.Option(help="register this host's slots (its GPUs, or EVALFLOW_SLOTS)")] = True,
) -> None:
    """Server slots: one vLLM server per GPU (or CPU host) at a time, a Prefect global concurrency limit per
    host. Registers this host's and lists every host's (what `collection.shards: auto` counts)."""
    ops.slots(register)


@app.command("run")
def run_deployment(
    deployment: Annotated[str, typer.Argument(help="FLOW/DEPLOYMENT, e.g. eval/smoke", show_default=False)],
    param: Annotated[
        list[str] | None,
        typer.Option("--param", help="KEY=VALUE, the value as JSON (as `prefect deployment run`)", show_default=False),
    ] = None,
    timeout: Annotated[int, typer.Option(help="seconds to follow the run (it goes on after)")] = 3600,
) -> None:
    """Run a deployment and follow it here: its log lines and state changes until it ends, then its headline
    table, report and UI URL.

    Exits 1 unless the run completes. A worker for the deployment's pool must be running. Ctrl-C stops
    following; the run goes on (the message says how to cancel it).
    """
    raise typer.Exit(ops.run(deployment, param or [], timeout))


@app.command()
def stop() -> None:
    """Stop the workers started here, then the background server (`prefect server stop`)."""
    ops.stop()


def demo() -> None:
    """Run eval/smoke through a local Prefect server and worker (SmolLM2 on vLLM CPU), following its logs
    here; print its headline table and report.

    Starts the server, creates the vLLM runtime, the work pools and the blocks, deploys prefect.yaml and
    starts a CPU worker first, each only if missing; the deployment's model is converted while the
    deployments are made. `evalflow local stop` stops the server and workers.
    """
    from cli.common import log_to_stderr
    from ops.deploy import demo as run_demo

    log_to_stderr()  # the runtime's and the conversion's progress lines

    raise typer.Exit(run_demo())
