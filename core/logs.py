"""One logger for every stage: the Prefect run logger inside a run (shown in the UI and the
terminal), a plain `evalflow` logger outside one (CLI helpers, tests); stage timings."""

from __future__ import annotations

import logging
import time
from collections.abc import Generator
from contextlib import contextmanager

from prefect.exceptions import MissingContextError
from prefect.logging import get_run_logger

from errors import EvalflowError


def get_logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("evalflow")


class Stages:
    """Wall time and this process's CPU time per stage, for the report and the closing log line. The CPU
    time (every thread: the event loop, Prefect's engine and log threads) says what the client itself cost:
    a collect stage whose CPU nears its wall time is bound by the client, not the server."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Generator[None, None, None]:
        started, cpu = time.monotonic(), time.process_time()
        get_logger().info("stage %s: started", name)
        try:
            yield
        finally:
            self.seconds[name] = round(time.monotonic() - started, 3)
            self.cpu_seconds[name] = round(time.process_time() - cpu, 3)
            get_logger().info("stage %s: %.1f s (%.1f s CPU)", name, self.seconds[name], self.cpu_seconds[name])


class _WithoutTraceback(logging.Filter):
    """Records of an error whose message already says what to fix keep their line, not their traceback."""

    def __init__(self, expected: tuple[type[BaseException], ...]) -> None:
        super().__init__()
        self.expected = expected

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], self.expected):
            record.exc_info, record.exc_text = None, None
        return True


# Where Prefect's engines log a task or flow run's exception with its traceback.
ENGINE_LOGGERS = ("prefect.task_runs", "prefect.flow_runs", "prefect.task_engine", "prefect.flow_engine")


def quiet_tracebacks(expected: tuple[type[BaseException], ...] = (EvalflowError,)) -> None:
    """Prefect logs every failed task and flow run with its traceback (three for one bad checkpoint):
    for `expected` errors (by default evalflow's own, whose message names what to fix) the terminal, the
    UI and a deployment's logs show the one line. Installed once per process; other errors keep their
    tracebacks."""
    for name in ENGINE_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _WithoutTraceback) for f in logger.filters):
            logger.addFilter(_WithoutTraceback(expected))
