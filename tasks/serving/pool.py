"""A pool of replicas serving one model (`server.base_url` as a list): each request goes to the replica
with the fewest requests outstanding; a replica that stops answering is left out, its failed requests
go to the others at once, and a background probe brings it back when it answers again."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import openai

from core.logs import get_logger
from tasks.serving.clients import async_client

PROBE_INTERVAL_S = 2.0
PROBE_TIMEOUT_S = 3.0
FAILURES_TO_EJECT = 2
DOWN_STATUS = frozenset({502, 503, 504})  # a proxy or load balancer in front of a replica that is gone


def replica_down(exc: BaseException) -> bool:
    """Whether a request error says the replica is not answering (rather than the request being wrong)."""
    if isinstance(exc, openai.APIConnectionError):  # refused, reset, timed out
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code in DOWN_STATUS


def refused(exc: BaseException) -> bool:
    """A connection that could not be opened: nothing listens there. Other errors (a kept-alive connection
    the server closed as it was reused, one reset) also happen to healthy servers, so they take a replica
    out only when they repeat."""
    cause = exc.__cause__  # by name: the openai SDK may carry its own copy of httpx
    return cause is not None and type(cause).__name__ in ("ConnectError", "ConnectTimeout")


@dataclass
class Replica:
    url: str
    client: openai.AsyncOpenAI = field(repr=False)
    outstanding: int = 0
    up: bool = True
    reason: str = ""
    requests: int = 0  # sent to it so far (for the run's record)
    failures: int = 0  # consecutive requests that found it not answering


class ReplicaPool:
    """The run's OpenAI clients, one per replica, and which replicas are in rotation."""

    def __init__(
        self, urls: tuple[str, ...], api_key: str, timeout_s: float, probe_interval_s: float = PROBE_INTERVAL_S
    ) -> None:
        self.api_key = api_key
        self.probe_interval_s = probe_interval_s
        self.replicas = [Replica(url, async_client(url, api_key, timeout_s)) for url in urls]
        self._turn = itertools.count()
        self._probe: asyncio.Task[None] | None = None

    @property
    def many(self) -> bool:
        return len(self.replicas) > 1

    def pick(self, avoid: Replica | None = None) -> Replica | None:
        """The replica in rotation with the fewest outstanding requests (ties in turn), other than `avoid`
        (which just failed this request) unless it is the only one; None if all are out."""
        live = [r for r in self.replicas if r.up and r is not avoid] or [r for r in self.replicas if r.up]
        if not live:
            return None
        fewest = min(r.outstanding for r in live)
        tied = [r for r in live if r.outstanding == fewest]
        return tied[next(self._turn) % len(tied)]

    @contextlib.contextmanager
    def using(self, replica: Replica) -> Iterator[Replica]:
        replica.outstanding += 1
        replica.requests += 1
        try:
            yield replica
            replica.failures = 0  # it answered
        finally:
            replica.outstanding -= 1

    def failed(self, replica: Replica, exc: BaseException, reason: str) -> None:
        """A request found `replica` not answering: out at once if refused, else on the second in a row."""
        replica.failures += 1
        if refused(exc) or replica.failures >= FAILURES_TO_EJECT:
            self.eject(replica, reason)

    def eject(self, replica: Replica, reason: str) -> None:
        """Take a replica out of rotation (once) and make sure the probe is watching for its return."""
        if not replica.up or not self.many:
            return
        replica.up, replica.reason = False, reason
        left = sum(r.up for r in self.replicas)
        get_logger().warning("replica %s taken out (%s); %d of %d left", replica.url, reason, left, len(self.replicas))
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._watch(), name="replica-probe")

    async def answers(self, replica: Replica, client: httpx.AsyncClient) -> bool:
        try:
            auth = {"Authorization": f"Bearer {self.api_key}"}
            response = await client.get(f"{replica.url.rstrip('/')}/models", headers=auth)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def _watch(self) -> None:
        """Probe the replicas that are out until every one is back."""
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as client:
            while any(not r.up for r in self.replicas):
                await asyncio.sleep(self.probe_interval_s)
                for replica in [r for r in self.replicas if not r.up]:
                    if await self.answers(replica, client):
                        replica.up, replica.failures = True, 0
                        get_logger().info("replica %s answers again: back in rotation", replica.url)

    async def wait_for_any(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for a replica to be in rotation."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not any(r.up for r in self.replicas):
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(min(0.25, self.probe_interval_s))
        return True

    def down_reasons(self) -> str:
        return "; ".join(f"{r.url}: {r.reason}" for r in self.replicas if not r.up)

    async def aclose(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
        for replica in self.replicas:
            await replica.client.close()
