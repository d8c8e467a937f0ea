"""Progress of long collections: rollouts done/total, rollouts/s, tokens/s and ETA, logged per batch
(Prefect UI and terminal) and mirrored in a Prefect progress artifact."""

from __future__ import annotations

import time
from datetime import timedelta
from uuid import UUID

from prefect.artifacts import acreate_progress_artifact, aupdate_progress_artifact
from prefect.context import get_run_context
from prefect.exceptions import MissingContextError

from core.logs import get_logger


def _in_run() -> bool:
    try:
        get_run_context()
        return True
    except MissingContextError:
        return False


class Progress:
    def __init__(self, total: int, label: str = "rollouts") -> None:
        self.total = total
        self.label = label
        self.done = 0
        self.generated = 0  # rollouts generated in this run (cached ones are not)
        self.tokens = 0
        self.started = time.monotonic()
        self.artifact: UUID | None = None

    async def start(self) -> None:
        if _in_run() and self.total:
            self.artifact = await acreate_progress_artifact(0.0, key="eval-progress", description=self._text(0.0))

    def _text(self, elapsed: float) -> str:
        rate = self.generated / elapsed if elapsed > 0 else 0.0
        tok_rate = self.tokens / elapsed if elapsed > 0 else 0.0
        remaining = self.total - self.done
        eta = timedelta(seconds=round(remaining / rate)) if rate > 0 else "?"
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return (
            f"{self.label} {self.done}/{self.total} ({pct:.0f}%), {rate:.2f} rollouts/s, "
            f"{tok_rate:.0f} tokens/s, ETA {eta}"
        )

    async def advance(self, rollouts: int, tokens: int = 0, generated: bool = True) -> None:
        self.done += rollouts
        if generated:
            self.generated += rollouts
            self.tokens += tokens
        text = self._text(time.monotonic() - self.started)
        get_logger().info(text)
        if self.artifact is not None:
            await aupdate_progress_artifact(self.artifact, 100.0 * self.done / max(self.total, 1), description=text)
