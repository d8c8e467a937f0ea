"""How many requests to keep in flight: fixed (the user's override) or found while collecting.

The best concurrency differs per server, model and machine (on a 2-core CPU box with SmolLM2 it was 32
in one measurement and 64 in another, where 32 gave 0.75 of 64's tokens/s), so by default the limiter
climbs: it measures generated tokens/s over a window of completions at one limit, doubles the limit while
that improves throughput by more than `gain`, and settles on the best level seen. It starts at 64: a short
run ends before its first window does, so a low start costs it the whole run. Every `reprobe_every`
windows it tries the next level up again, so a server that warms up or a longer tail of requests is
followed.
"""

from __future__ import annotations

import asyncio
import time

from tasks.logs import get_logger


class Limiter:
    """A semaphore whose size can change while requests are in flight."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self._cond = asyncio.Condition()

    async def __aenter__(self) -> Limiter:
        async with self._cond:
            await self._cond.wait_for(lambda: self.in_flight < self.limit)
            self.in_flight += 1
        return self

    async def __aexit__(self, *exc: object) -> None:
        async with self._cond:
            self.in_flight -= 1
            self._cond.notify_all()

    async def resize(self, limit: int) -> None:
        async with self._cond:
            self.limit = limit
            self._cond.notify_all()

    def record(self, completion_tokens: int) -> None:
        """Called once per finished request (fixed limiters ignore it)."""


class AdaptiveLimiter(Limiter):
    def __init__(
        self, start: int = 64, minimum: int = 4, maximum: int = 256, gain: float = 0.03, reprobe_every: int = 20
    ) -> None:
        super().__init__(start)
        self.minimum, self.maximum, self.gain, self.reprobe_every = minimum, maximum, gain, reprobe_every
        self.best: tuple[int, float] | None = None  # (limit, tokens/s)
        self.climbing = True
        self.windows = 0
        self._window_start = time.monotonic()
        self._tokens = 0
        self._done = 0
        self.history: list[tuple[int, float]] = []

    def _window_size(self) -> int:
        return max(self.limit, 32)

    def record(self, completion_tokens: int) -> None:
        self._tokens += completion_tokens
        self._done += 1
        if self._done >= self._window_size():
            rate = self._tokens / max(time.monotonic() - self._window_start, 1e-6)
            asyncio.get_running_loop().create_task(self._decide(rate))
            self._window_start, self._tokens, self._done = time.monotonic(), 0, 0

    async def _decide(self, rate: float) -> None:
        self.windows += 1
        self.history.append((self.limit, rate))
        improved = self.best is None or rate > self.best[1] * (1 + self.gain)
        if self.best is None or rate > self.best[1] or self.limit == self.best[0]:
            self.best = (self.limit, rate)  # a re-measured best level takes its new figure (servers drift)
        if self.climbing and improved and self.limit * 2 <= self.maximum:
            new = self.limit * 2
        else:
            self.climbing = False
            new = self.best[0]
            if self.windows % self.reprobe_every == 0 and new * 2 <= self.maximum:
                new, self.climbing = new * 2, True  # look up once more
        if new != self.limit:
            get_logger().info(
                "concurrency %d -> %d (%.0f tokens/s at %d; best so far %d at %.0f tokens/s)",
                self.limit, new, rate, self.limit, *self.best,
            )  # fmt: skip
            await self.resize(max(self.minimum, new))


def make_limiter(concurrency: int | None) -> Limiter:
    """A fixed limiter for an explicit `collection.concurrency`, else the adaptive one."""
    return Limiter(concurrency) if concurrency else AdaptiveLimiter()
