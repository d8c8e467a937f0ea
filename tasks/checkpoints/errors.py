"""The one error type of checkpoint preparation."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """The model source is missing, unreadable or does not convert; the message says what to fix."""
