"""The parent's side of one sandboxed run: start `unshare` + PID 1, feed it the run, collect its pipes.

PID 1 (sandbox/pid1.py) gets its config in argv (nothing secret: limits, uids, paths) and the run
itself on stdin, which stays open for the whole run: when this process dies, PID 1 sees the pipe close
and tears the run down. The status pipe carries PID 1's report and, in a judged run, the judge's verdicts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import time
from dataclasses import dataclass
from typing import Any

from sandbox.pid1 import SPEC_HEADER, init_source

log = logging.getLogger(__name__)

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
MAX_OUTPUT_BYTES = 64 * 1024
MAX_STATUS_BYTES = 8 * 1024 * 1024
# Seconds the parent waits past timeout_s for PID 1 to report before it kills the process group itself.
BACKSTOP_GRACE_S = 3.0


@dataclass(frozen=True)
class Raw:
    """What came back from one run, before it is judged: PID 1's (and the judge's) status lines, the outputs."""

    status: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    backstop: bool


class Clip:
    """Keeps the first and last `limit // 2` bytes of a stream of any length."""

    def __init__(self, limit: int) -> None:
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - self.half)]

    def text(self) -> str:
        dropped = self.total - len(self.head) - len(self.tail)
        middle = f"\n...[{dropped} bytes clipped]...\n".encode() if dropped > 0 else b""
        return bytes(self.head + middle + self.tail).decode("utf-8", errors="replace")


async def drain(stream: asyncio.StreamReader | None, limit: int = MAX_OUTPUT_BYTES) -> str:
    clip = Clip(limit)
    if stream is not None:
        while chunk := await stream.read(65536):
            clip.add(chunk)
    return clip.text()


async def drain_lines(stream: asyncio.StreamReader, limit: int = MAX_STATUS_BYTES) -> list[str]:
    """Every line up to `limit` bytes (a verdict must never be cut in half), then a marker line if more came."""
    kept, size, overflow = bytearray(), 0, False
    while chunk := await stream.read(65536):
        size += len(chunk)
        if size <= limit:
            kept += chunk
        else:
            overflow = True
    lines = kept.decode("utf-8", errors="replace").splitlines()
    return [*lines, f"error the status pipe carried over {limit} bytes"] if overflow else lines


def killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _ns_members(ns_inode: int) -> list[int]:
    """Host pids of live (not zombie) processes in the PID namespace with this inode.

    Zombies are skipped: a killed init whose parent died too waits for the host's init to reap it.
    """
    target = f"pid:[{ns_inode}]"
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/ns/pid") != target:
                    continue
                with open(f"/proc/{entry}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
                if state not in (b"Z", b"X"):
                    pids.append(int(entry))
    return pids


async def _wait_ns_empty(ns_inode: int, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while await asyncio.to_thread(_ns_members, ns_inode):
        if time.monotonic() > deadline:
            log.error("sandbox PID namespace %s still has processes after SIGKILL", ns_inode)
            return
        await asyncio.sleep(0.05)


def sandbox_argv(cfg: dict[str, Any]) -> list[str]:
    unshare = shutil.which("unshare", path=SAFE_PATH) or "unshare"
    userns = ("--user", "--map-root-user") if cfg["userns"] else ()  # sandbox/userns.py
    return [
        *(unshare, *userns, "--pid", "--net", "--mount", "--ipc", "--uts", "--fork", "--kill-child"),
        *("--propagation", "private", "--", cfg["python"], "-I", "-S", "-c", init_source(), json.dumps(cfg)),
    ]


async def _feed(stdin: asyncio.StreamWriter | None, run: dict[str, Any]) -> None:
    """Write the run on PID 1's stdin and leave the pipe open (its closing tells PID 1 we are gone)."""
    body = json.dumps(run).encode()
    if stdin is not None:
        with contextlib.suppress(ConnectionError):
            stdin.write(len(body).to_bytes(SPEC_HEADER, "big") + body)
            await stdin.drain()


async def _reader(fd: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    pipe = os.fdopen(fd, "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    return reader, transport


async def run_sandboxed(cfg: dict[str, Any], run: dict[str, Any]) -> Raw:
    """Start the sandbox with `cfg` (its status_fd is filled in here), hand it `run`, collect everything."""
    start = time.monotonic()
    status_r, status_w = os.pipe()
    cfg = {**cfg, "status_fd": status_w}
    proc: asyncio.subprocess.Process | None = None
    transport: asyncio.BaseTransport | None = None
    tasks: list[asyncio.Future[Any]] = []
    try:
        try:
            proc = await asyncio.create_subprocess_exec(
                *sandbox_argv(cfg),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={"PATH": SAFE_PATH, "LANG": "C.UTF-8"},
                pass_fds=(status_w,),
                start_new_session=True,
            )
        except OSError as e:
            os.close(status_r)
            return Raw([f"error cannot start the sandbox: {e}"], None, "", "", time.monotonic() - start, False)
        finally:
            os.close(status_w)
        status, transport = await _reader(status_r)
        out, err, report = (asyncio.ensure_future(drain(proc.stdout)), asyncio.ensure_future(drain(proc.stderr)),
                            asyncio.ensure_future(drain_lines(status)))  # fmt: skip
        tasks = [out, err, report, asyncio.ensure_future(_feed(proc.stdin, run))]
        backstop = False
        try:
            await asyncio.wait_for(proc.wait(), cfg["timeout_s"] + BACKSTOP_GRACE_S)
        except TimeoutError:
            # PID 1 did not report in time (a stalled machine, or it died): take down its whole group.
            backstop = True
            killpg(proc.pid)
            await proc.wait()
        # The pipes close once the namespace is empty; a process stuck in the kernel must not hold us.
        await asyncio.wait((out, err, report), timeout=BACKSTOP_GRACE_S)
        stdout, stderr = (task.result() if task.done() else "" for task in (out, err))
        lines = report.result() if report.done() else ["error the status pipe stayed open after the sandbox ended"]
        if backstop:
            for line in lines:
                if line.startswith("ns "):
                    await _wait_ns_empty(int(line.split()[1]))
        return Raw(lines, proc.returncode, stdout, stderr, time.monotonic() - start, backstop)
    finally:
        if proc is not None and proc.returncode is None:
            killpg(proc.pid)  # we were cancelled: PID 1 dies, and the kernel kills the rest of its namespace
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), BACKSTOP_GRACE_S)
        for task in tasks:
            task.cancel()
        if transport is not None:
            transport.close()
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
