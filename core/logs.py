"""One logger for every stage: the Prefect run logger inside a run (shown in the UI and the
terminal), a plain `evalflow` logger outside one (CLI helpers, tests); stage timings."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prefect.exceptions import MissingContextError
from prefect.logging import get_run_logger


def get_logger() -> logging.Logger | logging.LoggerAdapter:
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("evalflow")


class Stages:
    """Wall time per stage, for the report and the closing log line."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        get_logger().info("stage %s: started", name)
        try:
            yield
        finally:
            self.seconds[name] = round(time.monotonic() - started, 3)
            get_logger().info("stage %s: %.1f s", name, self.seconds[name])
