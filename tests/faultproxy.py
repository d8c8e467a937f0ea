"""A counting, fault-injecting HTTP proxy in front of the real vLLM server (tests and bench only).

It forwards every request unchanged and counts what reached the server; for chat completions it can
answer with a 503, reset the connection, or stall longer than the client's timeout, each with a
given probability (seeded, so a test is repeatable). It invents no answers: every completion comes
from the real server.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
from dataclasses import dataclass, field

import httpx

MAX_BODIES = 1000


@dataclass
class Faults:
    error_rate: float = 0.0  # answer 503 without forwarding
    reset_rate: float = 0.0  # close the connection with a TCP reset without answering
    stall_rate: float = 0.0  # hold the request for stall_s, then drop it
    stall_s: float = 30.0
    seed: int = 0


@dataclass
class Counts:
    forwarded: int = 0  # chat completions that reached the server
    answered: int = 0  # chat completions whose answer reached the client
    errors: int = 0
    resets: int = 0
    stalls: int = 0
    paths: dict[str, int] = field(default_factory=dict)


class FaultProxy:
    def __init__(self, upstream: str, faults: Faults | None = None) -> None:
        self.upstream = upstream.rstrip("/")  # http://127.0.0.1:PORT (no /v1)
        self.faults = faults or Faults()
        self.counts = Counts()
        self._rng = random.Random(self.faults.seed)
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0
        self.refuse = False  # reset every connection at once, any path: a replica that is gone
        # after this many chat completions answered, the server "dies": every later answer is dropped (the
        # connection reset) and every new connection refused, as when its process is killed mid-phase
        self.die_after: int | None = None
        self.bodies: list[bytes] = []  # the chat completion requests' bodies, as sent (the last MAX_BODIES)
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        self._client = httpx.AsyncClient(base_url=self.upstream, timeout=600)
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        async def _stop() -> None:
            if self._server:
                self._server.close()
            await self._client.aclose()

        asyncio.run_coroutine_threadsafe(_stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = b"" if self.refuse else await reader.readuntil(b"\r\n\r\n")
                if self.refuse:  # also on a kept-alive connection: the client sees a reset
                    sock = writer.get_extra_info("socket")
                    if sock is not None:  # SO_LINGER 0: close() sends a RST
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:] if ":" in x)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.counts.paths[path] = self.counts.paths.get(path, 0) + 1
                if path.endswith("/chat/completions"):
                    self.bodies = [*self.bodies[-(MAX_BODIES - 1) :], body]
                    outcome = await self._inject(writer)
                    if outcome == "closed":
                        return
                    if outcome == "answered":
                        continue
                    self.counts.forwarded += 1
                forward = {k: v for k, v in headers.items() if k not in ("host", "content-length", "connection")}
                response = await self._client.request(method, path, content=body, headers=forward)
                payload = response.content
                if path.endswith("/chat/completions") and self._dead():
                    writer.transport.abort()  # answered upstream, but the "killed" server never sent it
                    return
                out = [f"HTTP/1.1 {response.status_code} {response.reason_phrase}"]
                out += [f"{k}: {v}" for k, v in response.headers.items() if k.lower() not in _HOP_HEADERS]
                out += [f"content-length: {len(payload)}", "", ""]
                writer.write("\r\n".join(out).encode("latin-1") + payload)
                await writer.drain()
                if path.endswith("/chat/completions"):
                    self.counts.answered += 1
        except (asyncio.IncompleteReadError, ConnectionError, httpx.HTTPError):  # the upstream is gone: disconnect
            pass
        finally:
            writer.close()

    def _dead(self) -> bool:
        if self.die_after is not None and self.counts.answered >= self.die_after:
            self.refuse = True
        return self.refuse

    async def _inject(self, writer: asyncio.StreamWriter) -> str:
        """Apply at most one fault: 'answered' (503 sent), 'closed' (reset or stalled), or 'forward'."""
        roll = self._rng.random()
        f = self.faults
        if roll < f.error_rate:
            self.counts.errors += 1
            body = b'{"error": {"message": "injected fault", "type": "ServiceUnavailable", "code": 503}}'
            writer.write(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            return "answered"
        if roll < f.error_rate + f.reset_rate:
            self.counts.resets += 1
            sock = writer.get_extra_info("socket")
            if sock is not None:  # SO_LINGER 0: close() sends a RST instead of a FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return "closed"
        if roll < f.error_rate + f.reset_rate + f.stall_rate:
            self.counts.stalls += 1
            await asyncio.sleep(f.stall_s)
            writer.transport.abort()
            return "closed"
        return "forward"


_HOP_HEADERS = {"content-length", "transfer-encoding", "connection", "keep-alive"}
