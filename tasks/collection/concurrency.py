"""How many requests to keep in flight: fixed (the user's override) or found while collecting.

The best concurrency differs per server, model and machine: on a 2-core CPU box with SmolLM2, 64 requests
in flight gave 259 tokens/s and 128 gave 236, while a GPU server keeps gaining up to a few hundred. So by
default the limiter starts at 64 and climbs: it measures generated tokens/s over windows of completions,
doubles the limit while that improves throughput by more than `gain`, and otherwise settles on the best
level seen, looking one level up again every `reprobe_every` windows.

Two things keep the climb honest on a noisy machine. The first window at each level is not measured: it
holds requests admitted at the previous level and a run's start-up (a flow's own start competes with a CPU
server), which made 128 look 25% faster than 64 when it was 9% slower. And a level is probed only while
enough requests remain for the probe to pay off: a short run stays at its start level.

Waiting requests are served lowest `priority` first (the collection passes the batch's position), so the
earliest open batch finishes first and a crash loses as little as possible.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from core.logs import get_logger

# The position of the batch a request belongs to: set per batch by the collection, read by each request.
request_priority: ContextVar[int] = ContextVar("request_priority", default=0)


@dataclass
class Ticket:
    """One request's place in the limiter; the caller fills in the tokens the server generated."""

    epoch: int  # the limiter's resize count when the request was admitted (a level change starts an epoch)
    admitted: float
    tokens: int = 0


class Limiter:
    """A priority semaphore whose size can change while requests are in flight."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self.resizes = 0
        self.occupancy = 0.0  # integral of in_flight over time: its mean over a span is the span's concurrency
        self._stamp = time.monotonic()
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []  # heap: (priority, arrival, future)
        self._arrival = itertools.count()
        self.on_resize: list[Callable[[int], None]] = []  # called with the new limit

    @property
    def waiting(self) -> int:
        return sum(not f.done() for _, _, f in self._waiters)

    async def acquire(self, priority: int = 0) -> None:
        """Wait for one of `limit` places; lower `priority` values are admitted first. `release` gives it back."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._arrival), future))
        self._wake()
        try:
            await future  # admitted by _wake, which counts it in `in_flight`
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # admitted just as it was cancelled
                self._release()
            raise

    def release(self) -> None:
        self._release()

    @asynccontextmanager
    async def slot(self, priority: int = 0) -> AsyncIterator[Ticket]:
        """Hold one of `limit` places for a request; lower `priority` values are admitted first."""
        await self.acquire(priority)
        ticket = Ticket(self.resizes, time.monotonic())
        try:
            yield ticket
        finally:
            self._release()
        self.finished(ticket)  # only requests that returned: a failed one measures nothing

    def _count(self, change: int) -> None:
        now = time.monotonic()
        self.occupancy += self.in_flight * (now - self._stamp)
        self._stamp = now
        self.in_flight += change

    def _release(self) -> None:
        self._count(-1)
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self.limit:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():  # a cancelled waiter is skipped
                self._count(+1)
                future.set_result(None)

    def resize(self, limit: int) -> None:
        self.limit = limit
        self.resizes += 1
        self._wake()
        for callback in self.on_resize:
            callback(limit)

    def expect(self, requests: int) -> None:
        """How many requests the run still has to send (fixed limiters ignore it)."""

    def finished(self, ticket: Ticket) -> None:
        """Called once per request that returned (fixed limiters ignore it)."""


class Feed:
    """Which open batches still have rollouts waiting for their first request slot. A batch is *fed* once
    every rollout it collects has had one: it has nothing new to queue, only requests to finish, so the
    scheduler opens the next batch then instead of when the batch's slowest rollout returns (one long
    completion in an old batch otherwise leaves the server short of requests). Keyed by the batch's
    position (`request_priority`)."""

    def __init__(self) -> None:
        self._left: dict[int, int] = {}
        self._fed: dict[int, asyncio.Event] = {}

    def event(self, position: int) -> asyncio.Event:
        """Set once the batch at `position` is fed."""
        return self._fed.setdefault(position, asyncio.Event())

    def expect(self, position: int, rollouts: int) -> None:
        """The batch at `position` will send `rollouts` first requests (its kept rollouts send none)."""
        self._left[position] = rollouts
        if rollouts <= 0:
            self.event(position).set()

    def admitted(self, position: int) -> None:
        """A rollout of the batch at `position` got a slot for its first request."""
        left = self._left.get(position)
        if left is not None:
            self._left[position] = left - 1
            if left <= 1:
                self.event(position).set()

    def forget(self, position: int) -> None:
        self._left.pop(position, None)
        self._fed.pop(position, None)


class AdaptiveLimiter(Limiter):
    def __init__(
        self,
        start: int = 64,
        minimum: int = 4,
        maximum: int = 256,
        gain: float = 0.05,
        reprobe_every: int = 20,
        payoff: int = 8,
    ) -> None:
        super().__init__(start)
        self.minimum, self.maximum, self.gain = minimum, maximum, gain
        self.reprobe_every, self.payoff = reprobe_every, payoff
        self.rates: dict[int, float] = {}  # latest steady-state tokens/s per level
        self.level = start  # the best level confirmed so far: where a failed probe returns
        self.climbing = True
        self.windows = 0  # measured windows
        self.remaining: int | None = None  # requests still to send; None: unknown (always worth probing)
        self._settled = False  # whether the current level's first window has passed
        self._tokens = self._busy = 0.0  # the window's generated tokens and request-seconds
        self._done = 0
        self._window = (time.monotonic(), 0.0)  # (start, occupancy then)
        self.history: list[tuple[int, float]] = []

    def expect(self, requests: int) -> None:
        self.remaining = requests

    def _window_size(self) -> int:
        return max(self.limit, 32)

    def finished(self, ticket: Ticket) -> None:
        if self.remaining is not None:
            self.remaining = max(0, self.remaining - 1)
        if ticket.epoch != self.resizes:
            return  # admitted at another level: its latency says little about this one
        self._tokens += ticket.tokens
        self._busy += time.monotonic() - ticket.admitted
        self._done += 1
        if self._done >= self._window_size():
            # Little's law: tokens/s = requests in flight x tokens per request-second. Per-request latencies
            # make it immune to requests finishing in bursts (requests admitted together, as at a run's
            # start, tend to finish together), which throw a count of completions per second off by 2x.
            self._count(0)
            (start, occupancy), now = self._window, time.monotonic()
            in_flight = (self.occupancy - occupancy) / max(now - start, 1e-9)
            rate = in_flight * self._tokens / max(self._busy, 1e-9)
            self._restart_window()
            if self._settled:
                self._decide(rate)  # a new level starts unsettled again
            else:
                self._settled = True

    def _restart_window(self) -> None:
        self._tokens = self._busy = 0.0
        self._done = 0
        self._count(0)
        self._window = (time.monotonic(), self.occupancy)

    def _worth_probing(self, level: int) -> bool:
        """A probe costs two windows at `level`; it pays only if many more requests follow."""
        if level > self.maximum:
            return False
        return self.remaining is None or self.remaining >= self.payoff * level

    def _decide(self, rate: float) -> None:
        self.windows += 1
        self.history.append((self.limit, rate))
        self.rates[self.limit] = rate  # a re-measured level takes its new figure (servers drift)
        if self.climbing:
            below = self.rates.get(self.limit // 2) if self.limit != self.level else None
            if below is not None and rate <= below * (1 + self.gain):
                new, self.climbing = self.level, False  # doubling did not pay for the extra load: back down
            else:
                self.level = self.limit  # better (or the first level measured): keep it
                new = self.limit * 2 if self._worth_probing(self.limit * 2) else self.limit
                self.climbing = new != self.limit
        else:
            new = self.level
            if self.windows % self.reprobe_every == 0 and self._worth_probing(new * 2):
                new, self.climbing = new * 2, True  # look up once more
        if new != self.limit:
            get_logger().info(
                "concurrency %d -> %d (%.0f tokens/s at %d; %s)",
                self.limit, new, rate, self.limit,
                "probing" if self.climbing else f"settled: {new} gave {self.rates[new]:.0f} tokens/s",
            )  # fmt: skip
            self._settled = False
            self.resize(max(self.minimum, new))
            self._restart_window()

    @property
    def best(self) -> tuple[int, float] | None:
        """The level settled on and its latest tokens/s (None before the first measurement)."""
        return (self.level, self.rates[self.level]) if self.level in self.rates else None


def make_limiter(concurrency: int | None) -> Limiter:
    """A fixed limiter for an explicit `collection.concurrency`, else the adaptive one."""
    return Limiter(concurrency) if concurrency else AdaptiveLimiter()
