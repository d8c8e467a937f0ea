"""What every command shares: one-line errors with exit status 2, `key=value` options, logging to stderr."""

from __future__ import annotations

import logging
import sys
from typing import Any, NoReturn

import typer
from pydantic import ValidationError

from core.overrides import apply_override

# Exit status of a command that was given something it cannot use (as argparse and click do).
USAGE_ERROR = 2


def one_line(exc: BaseException) -> str:
    """The error as one line: each pydantic error as `dotted.field: message`, other messages unwrapped."""
    if isinstance(exc, ValidationError):
        parts = []
        for error in exc.errors(include_url=False, include_input=False):  # inputs may hold secrets
            field = ".".join(str(part) for part in error["loc"])
            message = error["msg"].removeprefix("Value error, ")
            parts.append(f"{field}: {message}" if field else message)
        return "; ".join(parts)
    return " ".join(str(exc).split())


def fail(what: str, exc: BaseException | str) -> NoReturn:
    """Print `what: reason` on one line of stderr and exit with status 2."""
    reason = exc if isinstance(exc, str) else one_line(exc)
    typer.echo(f"{what}: {reason}", err=True)
    raise typer.Exit(USAGE_ERROR)


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs (dotted keys nest, values parse as YAML) as one mapping, e.g. fsspec options."""
    options: dict[str, Any] = {}
    for pair in pairs:
        apply_override(options, pair)
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


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is when a record comes (a test runner swaps it per command)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass
