"""Progress of a collection, counted per rollout and reported on a time cadence: the flow run's logs, the
Prefect progress artifact, and the terminal (a rich progress bar on a TTY, the log lines otherwise)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any, TextIO
from uuid import UUID

from prefect.artifacts import acreate_progress_artifact, aupdate_progress_artifact
from prefect.context import get_run_context
from prefect.exceptions import MissingContextError
from prefect.logging.handlers import PrefectConsoleHandler
from rich.console import Console
from rich.progress import BarColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Bar

from core.logs import get_logger
from core.rollout_row import RolloutRow

# how often progress is reported and open batches snapshot their finished rollouts (seconds);
# the run's value comes from CollectContext.progress_interval_s
PROGRESS_INTERVAL_S = 10.0
ARTIFACT_KEY = "eval-progress"
BAR_REFRESH_S = 1.0


def _in_run() -> bool:
    try:
        get_run_context()
        return True
    except MissingContextError:
        return False


def _terminal() -> TextIO | None:
    """stderr when a person watches it, not in a flow run a worker started (its runner sets
    PREFECT__FLOW_RUN_ID; it may inherit the worker's terminal): the bar goes there."""
    return sys.stderr if sys.stderr.isatty() and not os.environ.get("PREFECT__FLOW_RUN_ID") else None


class Progress:
    """Rollouts done out of `total`: cached (reused batches, or rollouts an earlier attempt kept),
    generated in this run, and errors (failed rollouts and rollouts recorded with an error)."""

    def __init__(self, total: int, interval_s: float = PROGRESS_INTERVAL_S, label: str = "collect") -> None:
        self.total = total
        self.interval_s = interval_s
        self.label = label
        self.cached = self.generated = self.errors = self.tokens = 0
        # batches finished by this run's requests: until one has (or a tenth of the rollouts to generate is
        # done, for a run of one big batch), the rate counts rollouts that finished early against a pipeline
        # still filling, and an ETA from it misleads
        self.batches_generated = 0
        self.started = time.monotonic()
        # rollouts counted per open batch, so a retry's kept rollouts and a batch another run finished
        # are counted once
        self._counted: dict[str, int] = {}
        self._artifact: UUID | None = None
        self._creating: asyncio.Task[None] | None = None

    @property
    def done(self) -> int:
        return self.cached + self.generated

    def add_cached(self, rollouts: int) -> None:
        self.cached += rollouts

    def add_kept(self, batch_key: str, rollouts: int) -> None:
        """An attempt of a batch starts with `rollouts` kept by earlier attempts (this run's or a killed one's)."""
        self._top_up(batch_key, rollouts)

    def add_rollout(self, batch_key: str, record: RolloutRow) -> None:
        """A rollout generated now."""
        self.generated += 1
        self.tokens += record.get("completion_tokens") or 0
        self.errors += record.get("error") is not None
        self._counted[batch_key] = self._counted.get(batch_key, 0) + 1

    def add_scored(self, batch_key: str) -> None:
        """A rollout scored now from stored completions (a judging phase): done, with no tokens generated."""
        self.generated += 1
        self._counted[batch_key] = self._counted.get(batch_key, 0) + 1

    def add_batch(self, rollouts: int, tokens: int, errors: int) -> None:
        """A whole batch generated elsewhere (by a shard of this run), counted when it reaches the store."""
        self.generated += rollouts
        self.tokens += tokens
        self.errors += errors
        self.batches_generated += 1

    def add_failure(self) -> None:
        self.errors += 1

    def batch_done(self, batch_key: str, rollouts: int) -> None:
        """A batch finished: whatever of it was not counted (another run collected it) counts as cached."""
        self.batches_generated += self._counted.get(batch_key, 0) > 0
        self._top_up(batch_key, rollouts)
        self._counted.pop(batch_key, None)

    def _top_up(self, batch_key: str, rollouts: int) -> None:
        counted = self._counted.get(batch_key, 0)
        if rollouts > counted:
            self.cached += rollouts - counted
            self._counted[batch_key] = rollouts

    def _counts(self) -> str:
        return f"{self.cached:,} cached, {self.generated:,} generated, {self.errors:,} errors"

    def _rates(self) -> str:
        elapsed = time.monotonic() - self.started
        rate = self.generated / elapsed if elapsed > 0 else 0.0
        tokens = self.tokens / elapsed if elapsed > 0 else 0.0
        remaining = max(self.total - self.done, 0)
        if not remaining:
            eta = "0:00:00"
        elif rate and (self.batches_generated or self.generated >= 0.1 * max(self.total - self.cached, 1)):
            eta = str(timedelta(seconds=round(remaining / rate)))
        else:
            eta = "after the first batch"
        return f"{rate:.1f} rollouts/s · {tokens:,.0f} tokens/s · ETA {eta}"

    def _percent(self) -> float:
        return 100.0 * self.done / self.total if self.total else 100.0

    def detail(self) -> str:
        """`200 cached, 1,034 generated, 3 errors · 4.1 rollouts/s · 512 tokens/s · ETA 0:08:00`"""
        return f"{self._counts()} · {self._rates()}"

    def line(self) -> str:
        """`collect 1,234/3,200 rollouts (38%; 200 cached, 1,034 generated, 3 errors) · 4.1 rollouts/s · ...`"""
        return (
            f"{self.label} {self.done:,}/{self.total:,} rollouts ({self._percent():.0f}%; {self._counts()}) · "
            f"{self._rates()}"
        )

    async def report(self, final: bool = False) -> None:
        """One report: the log line and the progress artifact. A failed artifact update (the API was busy)
        is logged and the collection goes on."""
        text = self.line()
        if final:
            text += f" · finished in {timedelta(seconds=round(time.monotonic() - self.started))}"
        get_logger().info(text, extra={"evalflow_progress": True})
        if self._creating is not None:
            # Started with the collection, and usually done by the first report. Shielded: the ticker is cancelled
            # when the collection ends, possibly while its report waits here, and that must not cancel the
            # creation the final report still waits for (a CancelledError ended a whole collection that way).
            await asyncio.shield(self._creating)
        if self._artifact is not None:
            try:
                await aupdate_progress_artifact(self._artifact, self._percent(), description=text)
            except Exception as exc:
                get_logger().warning("could not update the progress artifact: %s: %s", type(exc).__name__, exc)

    async def _create_artifact(self) -> None:
        try:
            self._artifact = await acreate_progress_artifact(0.0, key=ARTIFACT_KEY, description=self.line())
        except Exception as exc:  # progress is for people: the collection goes on without the artifact
            get_logger().warning("could not create the progress artifact: %s: %s", type(exc).__name__, exc)

    @contextlib.asynccontextmanager
    async def reporting(self, terminal: TextIO | None = None) -> AsyncIterator[Progress]:
        """Report every `interval_s` while the body runs, and once more at the end (the final line).
        On a terminal (`terminal`, default: stderr when it is a TTY) a progress bar, redrawn every
        second, replaces the log lines there; the logs and the artifact get them all the same."""
        self.started = time.monotonic()
        if _in_run() and self.total:  # created beside the first requests, not before them (an API round trip)
            self._creating = asyncio.create_task(self._create_artifact())
        terminal = terminal if terminal is not None else _terminal()
        step = min(self.interval_s, BAR_REFRESH_S) if terminal is not None else self.interval_s
        with self._bar(terminal) as bar:

            async def tick() -> None:
                due = time.monotonic() + self.interval_s
                while True:
                    await asyncio.sleep(step)
                    bar()
                    if time.monotonic() >= due - step / 2:
                        due += self.interval_s
                        await self.report()

            ticker = asyncio.create_task(tick())
            try:
                yield self
            finally:
                ticker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ticker
                bar()
                await self.report(final=True)

    @contextlib.contextmanager
    def _bar(self, terminal: TextIO | None) -> Iterator[Any]:
        """A rich progress bar on `terminal` (a no-op without one), updated by calling what it yields.
        While it shows, Prefect's console handlers print through its console (above the bar) and leave
        out the progress lines, which the bar shows."""
        if terminal is None:
            yield lambda: None
            return
        console = Console(file=terminal)
        columns = (TextColumn(f"{self.label}"), BarColumn(), TaskProgressColumn(), TextColumn("{task.completed:,}/"
                   "{task.total:,} rollouts"), TimeElapsedColumn(), TextColumn("{task.description}"))  # fmt: skip
        with Bar(*columns, console=console, transient=False) as bar, _through(console):
            task = bar.add_task(self.detail(), total=self.total)

            def update() -> None:
                bar.update(task, completed=self.done, description=self.detail())

            yield update


class _Quiet(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "evalflow_progress", False)


@contextlib.contextmanager
def _through(console: Console) -> Iterator[None]:
    """Prefect's console handlers print through `console` and skip progress lines, then are restored."""
    handlers = [
        h
        for logger in (logging.getLogger(), *logging.Logger.manager.loggerDict.values())
        if isinstance(logger, logging.Logger)
        for h in logger.handlers
        if isinstance(h, PrefectConsoleHandler)
    ]
    quiet = _Quiet()
    saved = [h.console for h in handlers]
    for h in handlers:
        h.console = console
        h.addFilter(quiet)
    try:
        yield
    finally:
        for h, original in zip(handlers, saved, strict=True):
            h.console = original
            h.removeFilter(quiet)
