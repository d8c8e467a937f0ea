"""What every command shares: one-line errors with exit status 2, `key=value` options, logging to stderr.

Every error evalflow raises on purpose (an `errors.EvalflowError`) ends a command in one place, the
`evalflow` group's `invoke` below: one line on stderr naming its kind (`config error: ...`, `run failed:
...`) and the kind's exit status (2 for a bad input). A command catches one itself only to add what the
user typed (`--config-path` for `model.config_path`)."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from pydantic import ValidationError
from typer.core import TyperGroup

from core.overrides import OverrideError, apply_override, validation_message
from errors import USAGE_ERROR, EvalflowError

if TYPE_CHECKING:
    from typer import _click  # the Click typer vendors: its groups and commands run with its Context


def one_line(exc: BaseException) -> str:
    """The error as one line: each pydantic error as `dotted.field: message`, other messages unwrapped."""
    if isinstance(exc, ValidationError):
        return validation_message(exc)
    return " ".join(str(exc).split())


def exit_with(exc: EvalflowError) -> NoReturn:
    """Print the error's one line (its kind, then its message) on stderr and exit with its kind's status."""
    typer.echo(exc.one_line(), err=True)
    raise typer.Exit(exc.exit_status)


def fail(what: str, exc: BaseException | str) -> NoReturn:
    """Print `what: reason` on one line of stderr and exit with status 2; evalflow's own errors say their kind
    instead of `what`, as everywhere."""
    if isinstance(exc, EvalflowError):
        exit_with(exc)
    reason = exc if isinstance(exc, str) else one_line(exc)
    typer.echo(f"{what}: {reason}", err=True)
    raise typer.Exit(USAGE_ERROR)


class EvalflowGroup(TyperGroup):
    """The `evalflow` command group: an EvalflowError from any command (or subcommand) ends it in one line."""

    def invoke(self, ctx: _click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EvalflowError as exc:
            exit_with(exc)


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs (dotted keys nest, values parse as YAML) as one mapping, e.g. fsspec options."""
    options: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise OverrideError(f"--option {pair!r} is not KEY=VALUE")
        try:
            apply_override(options, pair)
        except OverrideError as exc:
            raise OverrideError(f"--option {exc}") from exc
    return options


def log_to_stderr() -> None:
    """Progress of long steps (conversion, runtime set-up, waiting for another process) on stderr, so
    stdout stays the answer. A handler of evalflow's own logger: Prefect configures the root logger on
    import (a `basicConfig` afterwards does nothing)."""
    logger = logging.getLogger("evalflow")
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


class _Stderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a record comes (a test runner swaps it per command)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass
