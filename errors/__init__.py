"""The root of every error evalflow raises on purpose, in the lowest layer so that every layer can use it.

An `EvalflowError` says in its message what went wrong and what to fix; its `kind` says what the user
looks at: the config, a dataset, the checkpoint, the run store, a server, the run itself, or the local
Prefect setup. The command line prints any of them as one line, `config error: MESSAGE` (`run failed:
MESSAGE` for a run), and exits with the kind's status: 2 (a usage error, as argparse and click say)
for a bad input, 1 for a run or an operation that failed.

Each error class sets `kind`; one that callers catch as a builtin keeps that base too, e.g.
`class DatasetError(EvalflowError, ValueError)`.
"""

from __future__ import annotations

from typing import ClassVar, Literal, get_args

Kind = Literal["config", "dataset", "checkpoint", "store", "server", "run", "ops"]
KINDS: tuple[Kind, ...] = get_args(Kind)

# Exit status of a command that was given something it cannot use (as argparse and click do).
USAGE_ERROR = 2
# Exit status of a command whose work failed: a run that ends Failed, a local operation that cannot go on.
FAILED = 1

# What starts the one line: the kind, in words.
HEADLINES: dict[Kind, str] = {
    "config": "config error",
    "dataset": "dataset error",
    "checkpoint": "checkpoint error",
    "store": "store error",
    "server": "server error",
    "run": "run failed",
    "ops": "ops error",
}
EXIT_STATUS: dict[Kind, int] = {kind: FAILED if kind in ("run", "ops") else USAGE_ERROR for kind in KINDS}


class EvalflowError(Exception):
    """An error evalflow raises on purpose: its message names what to fix; `kind` says what it is about."""

    kind: ClassVar[Kind]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        kind = getattr(cls, "kind", None)
        if kind not in KINDS:
            raise TypeError(f"{cls.__qualname__}.kind is {kind!r}; set it to one of {', '.join(KINDS)}")

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self.kind]

    def one_line(self) -> str:
        """`KIND error: message`, the message's whitespace (a log tail's newlines) folded into single spaces."""
        return f"{HEADLINES[self.kind]}: {' '.join(str(self).split())}"


class ConfigError(EvalflowError, ValueError):
    """The configuration (a file, an override, a command-line option) cannot be used: the message names the field."""

    kind = "config"


from errors.module_run import refuse_module_run  # noqa: E402 (it imports the names above)

refuse_module_run(__name__)
