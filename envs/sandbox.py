"""Run untrusted (model-written) Python in a throwaway Linux sandbox, without blocking the event loop.

Why each layer (Linux, as root; checked once per process, and it fails loudly when unavailable):
- `unshare --pid --net --mount --ipc --uts --fork --kill-child` gives a fresh PID namespace (killing its
  init kills every descendant, also those that called setsid()), an empty network namespace (loopback
  down: nothing is reachable, not even the host's 127.0.0.1) and a private mount namespace.
- This module then runs as the namespace's PID 1 (root, stdlib only): it builds a minimal root on a
  size-capped tmpfs (read-only binds of /usr, /etc, /lib*, the interpreter's prefix; /dev/null & co; a
  fresh /proc), chroots into it, and forks the program under a throwaway uid that is unique per run, so
  RLIMIT_NPROC counts only this run's processes (root is exempt from it), no capability survives, and
  the scratch directory (the tmpfs' only writable place) is the only place it can write. The program
  gets rlimits, no_new_privs, a scrubbed environment and `python -I -S`.
- PID 1 enforces the wall-clock timeout, kills whatever is left in the namespace, reaps it and reports
  the program's fate on a pipe; the parent keeps a backstop timer that kills the whole process group.
  PID 1's code is envs/sandbox_root.py; this module is the parent side.
Parallel runs are bounded by a per-event-loop semaphore ($EVALFLOW_SANDBOX_PARALLEL, default os.cpu_count()).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import resource
import secrets
import shutil
import signal
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass
from typing import Any, Literal

from envs.sandbox_root import PROGRAM_NAME, init_source

log = logging.getLogger(__name__)

Outcome = Literal["pass", "fail", "timeout", "crash", "memory", "error"]

# Throwaway uids/gids for sandboxed programs: no passwd entry needed, far from real and subuid ranges.
UID_MIN = 2_000_000_000
UID_SPAN = 100_000_000
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
MAX_OUTPUT_BYTES = 64 * 1024
# Seconds the parent waits past timeout_s for PID 1 to report before it kills the process group itself.
BACKSTOP_GRACE_S = 3.0
_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "Out of memory", "out of memory")


class SandboxUnavailable(RuntimeError):
    """The isolation this module relies on cannot be set up on this machine."""


@dataclass(frozen=True)
class SandboxResult:
    """What happened to one program; `returncode` is the exit code, -signal, or None (timeout, error)."""

    outcome: Outcome
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    sandboxed: bool = True

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"


# ---------------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------------

MAX_PARALLEL: int = int(os.environ.get("EVALFLOW_SANDBOX_PARALLEL", "0")) or (os.cpu_count() or 1)
_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()
_problem: dict[str, str | None] = {}  # interpreter -> why the sandbox does not work there (None: it works)
_probe_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def _semaphore() -> asyncio.Semaphore:
    # One per loop: an asyncio.Semaphore is bound to the loop it first waited on.
    loop = asyncio.get_running_loop()
    sem = _semaphores.get(loop)
    if sem is None:
        sem = _semaphores[loop] = asyncio.Semaphore(MAX_PARALLEL)
    return sem


def default_interpreter() -> tuple[str, str]:
    """(binary, install prefix) of the Python that runs programs; the prefix is exposed read-only inside.

    $EVALFLOW_SANDBOX_PYTHON if set (prefix: two levels above the real binary), else the base interpreter
    of this one (not the venv), so that `-I -S` gives the bare standard library.
    """
    chosen = os.environ.get("EVALFLOW_SANDBOX_PYTHON")
    if chosen:
        python = os.path.realpath(shutil.which(chosen) or chosen)
        return python, os.path.dirname(os.path.dirname(python))
    base = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(base), sys.base_prefix


def _static_problem(python: str) -> str | None:
    if not sys.platform.startswith("linux"):
        return f"the sandbox needs Linux namespaces; this is {sys.platform}"
    if os.geteuid() != 0:
        return (
            "the sandbox must start as root (it creates namespaces, mounts a private root and runs the "
            "program as a throwaway uid); run the rollout worker as root, e.g. in its container"
        )
    if shutil.which("unshare", path=SAFE_PATH) is None:
        return "`unshare` (util-linux) is not installed"
    if not os.access(python, os.X_OK):
        return f"interpreter {python!r} is not executable"
    return None


async def sandbox_problem(python: str | None = None, prefix: str | None = None) -> str | None:
    """Why sandboxed runs cannot work here (None when they do); probed once per process and interpreter."""
    if python is None or prefix is None:
        python, prefix = default_interpreter()
    if python in _problem:
        return _problem[python]
    loop = asyncio.get_running_loop()
    lock = _probe_locks.get(loop)
    if lock is None:
        lock = _probe_locks[loop] = asyncio.Lock()
    async with lock:  # concurrent first calls share one probe
        if python not in _problem:
            problem = _static_problem(python)
            if problem is None:
                probe = await _run_sandboxed(
                    "print('ok')", python=python, prefix=prefix, timeout_s=20.0, limits=_limits(512, 32, 16, 20)
                )
                if probe.outcome != "pass" or probe.stdout.strip() != "ok":
                    problem = f"a probe run failed ({probe.outcome}): {probe.stderr.strip()[-1000:]}"
            _problem[python] = problem
    return _problem[python]


def _limits(memory_mb: int, max_processes: int, max_file_mb: int, cpu_s: int) -> dict[str, int]:
    mib = 1024 * 1024
    return {
        "RLIMIT_AS": memory_mb * mib,
        "RLIMIT_CPU": cpu_s,
        "RLIMIT_NPROC": max_processes,
        "RLIMIT_FSIZE": max_file_mb * mib,
        "RLIMIT_CORE": 0,
    }


async def run_python(
    code: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_processes: int = 32,
    max_file_mb: int = 16,
    cpu_s: int | None = None,
    disk_mb: int = 64,
    allow_unsandboxed: bool = False,
) -> SandboxResult:
    """Run `code` as a Python program in a fresh sandbox; outcome "pass" iff it exits with status 0.

    memory_mb caps each process' address space, max_processes the run's processes (threads count),
    max_file_mb any single file, cpu_s each process' CPU time (default: ceil(timeout_s) + 1), disk_mb
    the scratch directory. If the sandbox cannot be set up, this raises SandboxUnavailable, unless
    `allow_unsandboxed=True`: then the program runs as a plain child process (own session, scrubbed
    environment, rlimits, killed at the timeout) with NO filesystem, network or uid isolation; only
    for trusted code or throwaway machines. `SandboxResult.sandboxed` says which happened.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    cpu = cpu_s if cpu_s is not None else math.ceil(timeout_s) + 1
    limits = _limits(memory_mb, max_processes, max_file_mb, cpu)
    python, prefix = default_interpreter()
    problem = await sandbox_problem(python, prefix)
    if problem is not None and not allow_unsandboxed:
        raise SandboxUnavailable(
            f"cannot sandbox model-written code: {problem}. Refusing to run it unsandboxed; pass "
            "allow_unsandboxed=True (env option `allow_unsandboxed: true`) to accept that risk."
        )
    async with _semaphore():
        if problem is not None:
            log.warning("running model-written code WITHOUT a sandbox: %s", problem)
            return await _run_unsandboxed(code, python=python, timeout_s=timeout_s, limits=limits)
        return await _run_sandboxed(
            code, python=python, prefix=prefix, timeout_s=timeout_s, limits=limits, disk_mb=disk_mb
        )


def _child_env(workdir: str) -> dict[str, str]:
    """The program's whole environment: nothing is inherited from the evaluator (no credentials)."""
    return {
        "PATH": SAFE_PATH,
        "LANG": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": os.path.join(workdir, "tmp"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
    }


def _write_program(code: str) -> str:
    scratch = tempfile.mkdtemp(prefix="evalflow-sandbox-")
    with open(os.path.join(scratch, PROGRAM_NAME), "wb") as f:
        f.write(code.encode("utf-8", errors="replace"))  # model output may hold lone surrogates
    return scratch


class _Clip:
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


async def _drain(stream: asyncio.StreamReader | None, limit: int = MAX_OUTPUT_BYTES) -> str:
    clip = _Clip(limit)
    if stream is not None:
        while chunk := await stream.read(65536):
            clip.add(chunk)
    return clip.text()


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _read_status(fd: int) -> list[str]:
    """Lines PID 1 wrote on the status pipe (non-blocking: everything that is there)."""
    os.set_blocking(fd, False)
    data = b""
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 65536):
            data += chunk
    return data.decode("utf-8", errors="replace").splitlines()


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


def _sandbox_argv(cfg: dict[str, Any]) -> list[str]:
    unshare = shutil.which("unshare", path=SAFE_PATH) or "unshare"
    return [
        *(unshare, "--pid", "--net", "--mount", "--ipc", "--uts", "--fork", "--kill-child"),
        *("--propagation", "private", "--", cfg["python"], "-I", "-S", "-c", init_source(), json.dumps(cfg)),
    ]


async def _run_sandboxed(
    code: str, *, python: str, prefix: str, timeout_s: float, limits: dict[str, int], disk_mb: int = 16
) -> SandboxResult:
    start = time.monotonic()
    scratch = await asyncio.to_thread(_write_program, code)
    status_r, status_w = os.pipe()
    proc: asyncio.subprocess.Process | None = None
    drains: list[asyncio.Future[str]] = []
    cfg = {
        "scratch": scratch,
        "python": python,
        "prefix": prefix,
        "uid": UID_MIN + secrets.randbelow(UID_SPAN),
        "timeout_s": timeout_s,
        "limits": limits,
        "disk_mb": disk_mb,
        "env": _child_env(scratch),
        "status_fd": status_w,
    }
    try:
        try:
            proc = await asyncio.create_subprocess_exec(
                *_sandbox_argv(cfg),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={"PATH": SAFE_PATH, "LANG": "C.UTF-8"},
                pass_fds=(status_w,),
                start_new_session=True,
            )
        except OSError as e:
            return SandboxResult("error", None, "", f"cannot start the sandbox: {e}", time.monotonic() - start)
        finally:
            os.close(status_w)
        drains = [asyncio.ensure_future(_drain(proc.stdout)), asyncio.ensure_future(_drain(proc.stderr))]
        backstop = False
        try:
            await asyncio.wait_for(proc.wait(), timeout_s + BACKSTOP_GRACE_S)
        except TimeoutError:
            # PID 1 did not report in time (a stalled machine, or it died): take down its whole group.
            backstop = True
            _killpg(proc.pid)
            await proc.wait()
        status = _read_status(status_r)
        if backstop:
            for line in status:
                if line.startswith("ns "):
                    await _wait_ns_empty(int(line.split()[1]))
        stdout, stderr = await asyncio.gather(*drains)
        duration = time.monotonic() - start
        if backstop:
            return SandboxResult("timeout", None, stdout, stderr, duration)
        return _classify(status, proc.returncode, stdout, stderr, duration)
    finally:
        if proc is not None and proc.returncode is None:
            _killpg(proc.pid)  # we were cancelled: PID 1 dies, and the kernel kills the rest of its namespace
        for task in drains:
            task.cancel()
        os.close(status_r)
        await asyncio.shield(asyncio.to_thread(shutil.rmtree, scratch, True))


def _is_memory_error(stderr: str) -> bool:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    if lines and lines[-1].startswith("MemoryError"):
        return True
    return any(marker in stderr[-2000:] for marker in _MEMORY_MARKERS[1:])


def _classify(status: list[str], rc: int | None, stdout: str, stderr: str, duration: float) -> SandboxResult:
    """Outcome from PID 1's report: `exit N`, `signal N`, `timeout`, or `error ...`."""
    errors = [line[len("error ") :] for line in status if line.startswith("error ")]
    final = next((line for line in reversed(status) if line.partition(" ")[0] in ("exit", "signal", "timeout")), None)
    if errors or final is None:
        why = "; ".join(errors) or f"the sandbox exited with status {rc} without a report"
        return SandboxResult("error", None, stdout, f"sandbox error: {why}\n{stderr}", duration)
    kind, *arg = final.split()
    if kind == "timeout":
        return SandboxResult("timeout", None, stdout, stderr, duration)
    number = int(arg[0])
    if kind == "exit":
        if number == 0:
            return SandboxResult("pass", 0, stdout, stderr, duration)
        outcome: Outcome = "memory" if _is_memory_error(stderr) else "fail"
        return SandboxResult(outcome, number, stdout, stderr, duration)
    outcome = "memory" if _is_memory_error(stderr) else "crash"
    return SandboxResult(outcome, -number, stdout, stderr, duration)


async def _run_unsandboxed(code: str, *, python: str, timeout_s: float, limits: dict[str, int]) -> SandboxResult:
    """The explicit escape hatch: rlimits, own session and a scrubbed environment, nothing more."""
    start = time.monotonic()
    scratch = await asyncio.to_thread(_write_program, code)
    os.mkdir(os.path.join(scratch, "tmp"))

    def preexec() -> None:
        for name, value in limits.items():
            # Without a uid of its own, RLIMIT_NPROC would count all of this user's processes.
            if name != "RLIMIT_NPROC":
                resource.setrlimit(getattr(resource, name), (value, value))

    proc = await asyncio.create_subprocess_exec(
        python,
        "-I",
        "-S",
        PROGRAM_NAME,
        cwd=scratch,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_child_env(scratch),
        start_new_session=True,
        preexec_fn=preexec,
    )
    out_task = asyncio.ensure_future(_drain(proc.stdout))
    err_task = asyncio.ensure_future(_drain(proc.stderr))
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), timeout_s)
    except TimeoutError:
        timed_out = True
    finally:
        _killpg(proc.pid)  # also takes down children left in the group
        await proc.wait()
        await asyncio.shield(asyncio.to_thread(shutil.rmtree, scratch, True))
    stdout, stderr = await asyncio.gather(out_task, err_task)
    rc = proc.returncode
    status = ["timeout"] if timed_out else [f"exit {rc}" if rc >= 0 else f"signal {-rc}"]
    result = _classify(status, rc, stdout, stderr, time.monotonic() - start)
    return SandboxResult(result.outcome, result.returncode, stdout, stderr, result.duration_s, sandboxed=False)
