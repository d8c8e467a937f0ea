"""One logger for every stage: the Prefect run logger inside a run (shown in the UI and the
terminal), a plain `evalflow` logger outside one (CLI helpers, tests)."""

from __future__ import annotations

import logging

from prefect.exceptions import MissingContextError
from prefect.logging import get_run_logger


def get_logger() -> logging.Logger | logging.LoggerAdapter:
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("evalflow")
