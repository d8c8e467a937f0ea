"""The `evalflow` command: the top layer, it only parses arguments and calls flows, tasks and ops."""

from __future__ import annotations

import typer

from cli import envs, local, reports
from cli.common import EvalflowGroup
from cli.compare import compare
from cli.prepare import prepare
from cli.rescore import rescore
from cli.run import run
from cli.runtime import runtime
from cli.sweep import sweep
from cli.watch import notify, watch

app = typer.Typer(
    cls=EvalflowGroup,  # an EvalflowError from any command: one line naming its kind, exit status 2 (1: run, ops)
    no_args_is_help=True,
    rich_markup_mode="markdown",
    add_completion=False,
    # plain tracebacks: Rich's would print local variables, and some hold credentials
    pretty_exceptions_enable=False,
    help="Evaluate LLM checkpoints on Prefect: checkpoint -> vLLM server -> sampled rollouts -> analysis -> reports.",
)
app.command()(run)
app.command()(sweep)
app.command()(watch)
app.command()(notify)
app.command()(prepare)
app.command()(rescore)
app.command()(compare)
app.add_typer(reports.app, name="reports")
app.add_typer(envs.app, name="envs")
app.command()(runtime)
app.command()(local.demo)
app.add_typer(local.app, name="local")
