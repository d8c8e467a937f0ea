"""The one error type of checkpoint preparation."""

from __future__ import annotations

from errors import EvalflowError


class CheckpointError(EvalflowError, RuntimeError):
    """The model source is missing, unreadable or does not convert; the message says what to fix."""

    kind = "checkpoint"
