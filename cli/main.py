"""The `evalflow` command: the top layer, it only parses arguments and calls flows and tasks."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
