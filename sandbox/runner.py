"""Run untrusted (model-written) Python in a throwaway Linux sandbox, and judge it without trusting it.

Two backends, chosen by `backend()`: as root the one below; as any other user the same design inside user
namespaces (sandbox/userns.py says exactly what that one guarantees, and what it cannot without root).
Why each layer (Linux; checked once per process, and it fails loudly when unavailable):
- `unshare --pid --net --mount --ipc --uts --fork --kill-child` gives a fresh PID namespace (killing its
  init kills every descendant, also those that called setsid()), an empty network namespace and a
  private mount namespace. Its PID 1 (sandbox/pid1.py, the parent side is sandbox/launch.py)
  builds a root on a size-capped tmpfs (read-only binds of the system and the interpreter; nothing of the
  run ever touches the host's disk, so a SIGKILLed caller leaves nothing behind: PID 1 sees its stdin
  close and tears the run down), and runs children under throwaway uids with rlimits, no_new_privs, a
  scrubbed environment and `python -I -S`.
- One cgroup per run (sandbox/cgroup.py; v2, else v1) caps memory, processes and CPU bandwidth of
  the whole tree, and gives each run an equal CPU share however many processes a neighbour forks. Where
  neither works, runs fall back to per-process rlimits and the reason is logged once.

`run_python` runs a program and reports its exit status: fine for trusted checks, useless as a verifier.
`run_tests` is the verifier. The tests never enter the program's process: a judge process (its own uid;
without root, outside the program's PID namespace), which the program cannot signal, trace or read through
/proc, executes them, and reaches the program's functions by RPC that carries only plain data
(sandbox/harness_*.py). A test passes only when the judge ran it to its end; the judge's verdicts travel on a
pipe the program does not have. So exiting early, exit hooks, sys.excepthook, SystemExit, killed or patched
harnesses, patched builtins or modules, and objects with a rigged __eq__/__ne__/__bool__ (their results stay
references that the judge refuses to compare) all fail. What remains possible: answers hard-coded for the
tests a prompt shows (MBPP's are in its prompt) or special-cased inputs; results the judge cannot judge (a
custom class' own equality, mutation of arguments: the judge gets copies) fail even when right; `str()` of a
program object is the program's own; timing side channels; kernel exploits. Without the sandbox
(`allow_unsandboxed`) the judge runs as the same user and none of this holds.
Parallel runs are bounded by a per-event-loop semaphore ($EVALFLOW_SANDBOX_PARALLEL, default os.cpu_count()).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import os
import secrets
import shutil
import sys
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sandbox import cgroup, userns
from sandbox.launch import SAFE_PATH, Raw, run_sandboxed
from sandbox.pid1 import WORKDIR
from sandbox.unsandboxed import run_unsandboxed

log = logging.getLogger(__name__)

Outcome = Literal["pass", "fail", "timeout", "crash", "memory", "error"]

# Throwaway uids/gids for sandboxed programs: no passwd entry needed, far from real and subuid ranges.
# Each run takes an even uid for its program and the next (odd) one for its judge.
UID_MIN = 2_000_000_000
UID_SPAN = 100_000_000
HARNESS_MODULES = ("harness_codec", "harness_judge", "harness_runner")
_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "Out of memory", "out of memory")


class SandboxUnavailable(RuntimeError):
    """The isolation this module relies on cannot be set up on this machine."""


@dataclass(frozen=True)
class TestSpec:
    """What a judged run checks: trusted code the judge runs, and the names it takes from the program.

    `setup` runs first in the judge (imports, helpers, HumanEval's prompt and `check`); each of `tests` then
    passes iff it runs to its end. `remote` names resolve to the program's globals (the function under
    test), overriding anything `setup` defined under that name.
    """

    __test__ = False  # not a pytest class
    setup: str
    tests: tuple[str, ...]
    remote: tuple[str, ...]


@dataclass(frozen=True)
class SandboxResult:
    """What happened to one run; `returncode` is the program's exit code, -signal, or None.

    For `run_tests`, outcome "pass" means every test passed; `tests_passed`/`tests_total` count them and
    `failures` says why the others failed. `peak_memory_bytes` is the run's cgroup peak (None without one).
    """

    outcome: Outcome
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    sandboxed: bool = True
    tests_passed: int = 0
    tests_total: int = 0
    failures: tuple[str, ...] = field(default_factory=tuple)
    peak_memory_bytes: int | None = None

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"


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


@functools.cache
def cgroup_plan() -> dict[str, Any] | None:
    """The cgroup hierarchy runs use (decided once per process); None, with a logged reason, if none works."""
    plan, why = cgroup.plan()
    if plan is None:
        log.warning("sandboxed runs are capped per process only (rlimits), not as a whole tree: %s", why)
    return plan


def covers_throwaway_uids(uid_map: str) -> bool:
    """Whether a /proc/self/uid_map maps every throwaway uid (a rootless container's "root" maps a few)."""
    for line in uid_map.splitlines():
        inside, _, count = map(int, line.split())
        if inside <= UID_MIN and inside + count >= UID_MIN + UID_SPAN:
            return True
    return False


@functools.cache
def _own_uid_map() -> str:
    with open("/proc/self/uid_map") as f:
        return f.read()


def backend() -> Literal["root", "userns"]:
    """Which sandbox this process builds: "root" (throwaway uids, cgroups) or "userns" (unprivileged)."""
    return "root" if os.geteuid() == 0 and covers_throwaway_uids(_own_uid_map()) else "userns"


def _static_problem(python: str) -> str | None:
    if not sys.platform.startswith("linux"):
        return f"the sandbox needs Linux namespaces; this is {sys.platform}"
    if backend() == "userns" and (problem := userns.problem()):
        return problem
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
                cfg = _config(python, prefix, 20.0, _limits(512, 32, 16, 20), 16, _caps(512, 32, 1.0))
                probe = _classify(await run_sandboxed(cfg, _run("print('ok')", None)), None)
                if probe.outcome != "pass" or probe.stdout.strip() != "ok":
                    hint = f" ({userns.PROBE_HINT})" if backend() == "userns" else ""
                    problem = f"a probe run failed ({probe.outcome}){hint}: {probe.stderr.strip()[-1000:]}"
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


def _caps(memory_mb: int, max_processes: int, cpus: float) -> dict[str, Any]:
    # The judge is one more process in the group.
    return {"memory_bytes": memory_mb * 1024 * 1024, "pids": max_processes + 1, "cpus": cpus}


def _child_env() -> dict[str, str]:
    """The program's whole environment: nothing is inherited from the evaluator (no credentials)."""
    return {
        "PATH": SAFE_PATH,
        "LANG": "C.UTF-8",
        "HOME": WORKDIR,
        "TMPDIR": f"{WORKDIR}/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
    }


@functools.cache
def _harness_files() -> dict[str, str]:
    here = Path(__file__).parent
    files = {f"sandbox/{name}.py": (here / f"{name}.py").read_text() for name in HARNESS_MODULES}
    return {"sandbox/__init__.py": "", **files}


def _run(program: str, tests: TestSpec | None) -> dict[str, Any]:
    """The run as PID 1 reads it from stdin (never argv: /proc/1/cmdline is readable inside)."""
    judge = None if tests is None else {"setup": tests.setup, "tests": list(tests.tests), "remote": list(tests.remote)}
    return {"program": program, "files": _harness_files() if judge else {}, "judge": judge}


def _config(
    python: str, prefix: str, timeout_s: float, limits: dict[str, int], disk_mb: int, caps: dict[str, Any]
) -> dict[str, Any]:
    unprivileged = backend() == "userns"
    uid = None if unprivileged else UID_MIN + 2 * secrets.randbelow(UID_SPAN // 2)
    return {
        "python": python,
        "prefix": prefix,
        "userns": unprivileged,
        "uid": uid,
        "judge_uid": None if uid is None else uid + 1,
        "timeout_s": timeout_s,
        "limits": limits,
        "disk_mb": disk_mb,
        "env": _child_env(),
        "cgroup": cgroup_plan(),
        "cgroup_name": f"{cgroup.GROUP_PREFIX}{uuid.uuid4().hex}",
        "cgroup_limits": caps,
    }


async def run_python(
    code: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_processes: int = 32,
    max_file_mb: int = 16,
    cpu_s: int | None = None,
    cpus: float = 1.0,
    disk_mb: int = 64,
    allow_unsandboxed: bool = False,
) -> SandboxResult:
    """Run `code` as a Python program in a fresh sandbox; outcome "pass" iff it exits with status 0.

    Not a verifier (a program decides its own exit status): use `run_tests` to check model code.
    memory_mb caps the whole run (cgroup) and each process' address space, max_processes the run's
    processes (threads count), cpus its CPU bandwidth (cgroup), cpu_s each process' CPU time (default:
    ceil(timeout_s) + 1), max_file_mb any single file, disk_mb the scratch directory. If the sandbox
    cannot be set up, this raises SandboxUnavailable, unless `allow_unsandboxed=True`: then the program runs
    as a plain child process (sandbox/unsandboxed.py) with NO isolation; only for trusted code or throwaway
    machines. `SandboxResult.sandboxed` says which happened.
    """
    return await _execute(code, None, locals())


async def run_tests(
    program: str,
    tests: TestSpec,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_processes: int = 32,
    max_file_mb: int = 16,
    cpu_s: int | None = None,
    cpus: float = 1.0,
    disk_mb: int = 64,
    allow_unsandboxed: bool = False,
) -> SandboxResult:
    """Load `program` in a sandbox and run `tests` against it from the judge; "pass" iff every test passed.

    The limits are those of `run_python`, for the program and the judge together; the timeout covers
    loading the program and all tests.
    """
    return await _execute(program, tests, locals())


async def _execute(program: str, tests: TestSpec | None, opts: dict[str, Any]) -> SandboxResult:
    timeout_s = opts["timeout_s"]
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    cpu = opts["cpu_s"] if opts["cpu_s"] is not None else math.ceil(timeout_s) + 1
    limits = _limits(opts["memory_mb"], opts["max_processes"], opts["max_file_mb"], cpu)
    python, prefix = default_interpreter()
    problem = await sandbox_problem(python, prefix)
    if problem is not None and not opts["allow_unsandboxed"]:
        raise SandboxUnavailable(
            f"cannot sandbox model-written code: {problem}. Refusing to run it unsandboxed; pass "
            "allow_unsandboxed=True (env option `allow_unsandboxed: true`) to accept that risk."
        )
    async with _semaphore():
        if problem is not None:
            log.warning("running model-written code WITHOUT a sandbox: %s", problem)
            raw = await run_unsandboxed(python, _run(program, tests), timeout_s, limits, _child_env())
            return _classify(raw, tests, sandboxed=False)
        caps = _caps(opts["memory_mb"], opts["max_processes"], opts["cpus"])
        cfg = _config(python, prefix, timeout_s, limits, opts["disk_mb"], caps)
        try:
            raw = await run_sandboxed(cfg, _run(program, tests))
        finally:
            if cfg["cgroup"]:  # PID 1 removes the group; not if it was killed first
                dirs = [os.path.join(p, cfg["cgroup_name"]) for p in cfg["cgroup"]["parents"].values()]
                if left := await asyncio.shield(asyncio.to_thread(cgroup.cg_remove, dirs)):
                    log.error("cannot remove the sandbox cgroups %s", left)
        return _classify(raw, tests)


def _is_memory_error(stderr: str) -> bool:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    if lines and lines[-1].startswith("MemoryError"):
        return True
    return any(marker in stderr[-2000:] for marker in _MEMORY_MARKERS[1:])


def _classify(raw: Raw, tests: TestSpec | None, sandboxed: bool = True) -> SandboxResult:
    """Outcome from the status lines: PID 1's `error ...`, `<role> exit|signal N`, `cgroup ...`, `end <why>`,
    and in a judged run the judge's `test {...}` verdicts."""
    fates: dict[str, tuple[str, int]] = {}
    verdicts: dict[int, dict[str, Any]] = {}
    errors, end, oom_kills, peak = [], None, 0, None
    for line in raw.status:
        kind, _, rest = line.partition(" ")
        if kind == "error":
            errors.append(rest)
        elif kind == "end":
            end = rest
        elif kind in ("program", "judge") and rest.partition(" ")[0] in ("exit", "signal"):
            how, _, number = rest.partition(" ")
            fates[kind] = (how, int(number))
        elif kind == "test" and tests is not None:
            try:
                verdict = json.loads(rest)
                verdicts.setdefault(int(verdict["i"]), verdict)
            except (ValueError, KeyError, TypeError):  # cut off by the status pipe's cap
                errors.append(f"a malformed verdict: {rest[:100]!r}")
        elif kind == "cgroup":
            stats = dict(item.split("=", 1) for item in rest.split())
            oom_kills = int(stats["oom_kills"])
            peak = None if stats["peak"] == "None" else int(stats["peak"])
    how, number = fates.get("program", ("", 0))
    returncode = number if how == "exit" else -number if how == "signal" else None
    total = len(tests.tests) if tests is not None else 0
    passed = sum(1 for i in range(total) if verdicts.get(i, {}).get("ok") is True)
    failures = tuple(str(v.get("error")) for i, v in sorted(verdicts.items()) if v.get("ok") is not True)

    def result(outcome: Outcome, stderr: str = raw.stderr) -> SandboxResult:
        return SandboxResult(outcome, returncode, raw.stdout, stderr, raw.duration_s, sandboxed, passed, total,
                             failures, peak)  # fmt: skip

    if raw.backstop or end == "timeout":
        return result("timeout")
    if end == "oom":
        return result("memory")
    if errors or end != "finished":
        why = "; ".join(errors) or f"the sandbox ended ({end}, status {raw.returncode}) without a report"
        return result("error", f"sandbox error: {why}\n{raw.stderr}")
    if tests is not None:
        if fates.get("judge") == ("exit", 0) and passed == total:
            return result("pass")
        if fates.get("judge", ("", 0)) != ("exit", 0) and "program" not in fates:
            return result("error", f"the judge failed: {fates.get('judge')}\n{raw.stderr}")
    elif how == "exit" and number == 0:
        return result("pass")
    if oom_kills or _is_memory_error(raw.stderr):
        return result("memory")
    return result("crash" if how == "signal" else "fail")
