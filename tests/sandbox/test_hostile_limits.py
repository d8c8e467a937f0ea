"""Hostile programs against the sandbox's resources: one cap per run tree, no leftovers, no starved neighbours."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from sandbox import cgroup, runner
from sandbox.runner import TestSpec, run_python, run_tests
from tests.sandbox.test_sandbox import pids_with, run, sandbox_pids, wait_until_gone

STATIC_PROBLEM = runner._static_problem(runner.default_interpreter()[0])
pytestmark = pytest.mark.skipif(STATIC_PROBLEM is not None, reason=f"no sandbox here: {STATIC_PROBLEM}")
MIB = 1024 * 1024
# As root this machine's cgroups must work (the fallback would hide a defect); without root only a delegated
# cgroup subtree gives one, and the unprivileged backend does not promise what needs it (sandbox/userns.py).
NO_CGROUP = STATIC_PROBLEM is None and runner.backend() == "userns" and runner.cgroup_plan() is None
needs_cgroup = pytest.mark.skipif(NO_CGROUP, reason="needs a cgroup, which this unprivileged user cannot create")


def run_groups() -> set[str]:
    """The sandbox cgroups that exist now, under this process' parents (none: no cgroup without root)."""
    plan = runner.cgroup_plan()
    if NO_CGROUP:
        return set()
    assert plan is not None, "this machine has usable cgroups: the fallback would hide a defect"
    return {
        os.path.join(parent, name)
        for parent in plan["parents"].values()
        for name in os.listdir(parent)
        if name.startswith(cgroup.GROUP_PREFIX)
    }


def procs_of(group: str) -> set[int]:
    try:
        return {int(pid) for pid in Path(group, "cgroup.procs").read_text().split()}
    except OSError:
        return set()


@needs_cgroup
def test_children_share_one_memory_cap() -> None:
    # Eight children of 300 MiB each: every one fits the per-process limit, together they do not.
    code = (
        "import os, time\npids = []\nfor _ in range(8):\n    pid = os.fork()\n    if pid == 0:\n"
        "        block = b'x' * (300 * 2 ** 20)\n        time.sleep(5)\n        os._exit(0)\n    pids.append(pid)\n"
        "for pid in pids:\n    os.waitpid(pid, 0)\nprint('all allocated')\n"
    )
    result = run(run_python(code, memory_mb=512, timeout_s=20.0))
    assert result.outcome == "memory", result
    assert "all allocated" not in result.stdout and result.duration_s < 10
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes <= 512 * MIB
    assert not wait_until_gone(sandbox_pids)


@needs_cgroup
def test_the_run_group_carries_the_caps_and_is_removed() -> None:
    """Other test processes (xdist workers) run sandboxed programs at the same time: every new run group
    is read, and this run's caps must be among them."""
    before = run_groups()

    def caps_of(group: str) -> tuple[int, str, int] | None:
        """One run group's caps, read from every hierarchy that holds it (cgroup v1: one per controller)."""
        caps = {}
        for path in (p for p in run_groups() if Path(p).name == group):
            for name in ("memory.limit_in_bytes", "memory.max", "pids.max", "cpu.cfs_quota_us", "cpu.max"):
                try:
                    caps[name] = Path(f"{path}/{name}").read_text().strip()
                except OSError:
                    continue
        memory = caps.get("memory.limit_in_bytes") or caps.get("memory.max")
        cpu = caps.get("cpu.cfs_quota_us") or caps.get("cpu.max", "").split(" ")[0]
        if not memory or "pids.max" not in caps or not cpu or "max" in (memory, cpu):
            return None
        return int(memory), caps["pids.max"], int(cpu)

    expected = (300 * MIB, "10", cgroup.CPU_PERIOD_US // 2)

    async def main() -> tuple[set[tuple[int, str, int]], Any]:
        task = asyncio.create_task(run_python("import time\ntime.sleep(3)", memory_mb=300, max_processes=9, cpus=0.5))
        seen: set[tuple[int, str, int]] = set()
        deadline = time.monotonic() + 3
        while expected not in seen and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            seen |= {caps for group in {Path(p).name for p in run_groups() - before} if (caps := caps_of(group))}
        return seen, await task

    seen, result = run(main())
    assert result.outcome == "pass"
    assert expected in seen, seen
    assert not {g for g in {Path(p).name for p in run_groups() - before} if caps_of(g) == expected}  # ours is gone


def test_without_cgroups_runs_fall_back_with_a_logged_reason(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(cgroup, "CONTROLLERS", ("memory", "no-such-controller"))
    runner.cgroup_plan.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="sandbox.runner"):
            result = run(run_python("print(1)"))
    finally:
        runner.cgroup_plan.cache_clear()
    assert (result.outcome, result.stdout, result.peak_memory_bytes) == ("pass", "1\n", None)
    assert "capped per process only" in caplog.text and "no-such-controller" in caplog.text


def test_a_sigkilled_caller_leaves_nothing_behind(tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    marker = f"sandbox-marker-{token}"
    caller = (  # the marker is put together at run time, so that the caller's own command line lacks it
        "import asyncio, sys\nfrom sandbox.runner import run_python\n"
        "argv = ['python3', '-c', 'import time; time.sleep(300)', 'sandbox-marker-' + sys.argv[1]]\n"
        "code = 'import subprocess, time\\nsubprocess.Popen(%r)\\ntime.sleep(60)' % argv\n"
        "asyncio.run(run_python(code, timeout_s=60))\n"
    )
    before = run_groups()
    # The old code kept its scratch folder in $TMPDIR on the host.
    proc = subprocess.Popen([sys.executable, "-c", caller, token], env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 20
        while not pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pids_with(marker), "the sandboxed program never started"
        # the run's cgroups (one per controller on cgroup v1): those holding the marked process; other
        # test processes (xdist workers) may run sandboxed programs meanwhile, in groups of their own
        ours = {g for g in run_groups() - before if set(pids_with(marker)) & procs_of(g)}
        assert NO_CGROUP or ours  # the run's cgroup exists while it runs
    finally:
        proc.kill()
        proc.wait()
    assert not wait_until_gone(lambda: pids_with(marker), timeout_s=5.0)
    assert not wait_until_gone(lambda: ours & run_groups(), timeout_s=5.0)
    assert list(tmp_path.iterdir()) == []


@needs_cgroup
def test_busy_neighbours_do_not_starve_a_correct_solution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "MAX_PARALLEL", 3)
    # Each neighbour spins 13 processes, each in a session of its own so that the kernel's per-session
    # autogroups cannot help: fairness per process or per session would leave the solution 1/27 of the CPUs.
    hog = "import os\nfor _ in range(12):\n    if os.fork() == 0:\n        os.setsid()\n        break\n"
    hog += "while True:\n    pass\n"
    solution = "def solve():\n    n = 0\n    for i in range(2_000_000):\n        n += i * i\n    return n\n"
    spec = TestSpec("", ("assert solve() == 2666664666667000000",), ("solve",))

    async def main() -> tuple[float, runner.SandboxResult]:
        hogs = [asyncio.create_task(run_python(hog, timeout_s=8.0)) for _ in range(2)]
        await asyncio.sleep(1.0)  # both neighbours are spinning
        start = time.monotonic()
        result = await run_tests(solution, spec, timeout_s=3.0)
        elapsed = time.monotonic() - start
        for task in hogs:
            task.cancel()
        await asyncio.gather(*hogs, return_exceptions=True)
        return elapsed, result

    elapsed, result = run(main())
    assert result.outcome == "pass", result
    assert elapsed < 3.0
    assert not wait_until_gone(sandbox_pids)


def test_program_cannot_reach_the_judge() -> None:
    # As root it sees the judge's pid, but cannot signal it, trace it, or read its memory, environment or fds.
    # Without root it sees only its PID namespace's reaper (pid 1): same kernel uid, so kill(1, 0) succeeds,
    # but the namespace's init ignores the SIGKILL it then sends (the run still passes), and it is non-dumpable.
    probe = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nme = os.getpid()\nreached = []\n"
        "for pid in [int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != me]:\n"
        "    for path in ('mem', 'environ', 'fd/5', 'fd/0', 'root/judge/spec.json'):\n        try:\n"
        "            open(f'/proc/{pid}/{path}', 'rb').close()\n            reached.append(f'{pid}/{path}')\n"
        "        except OSError:\n            pass\n    try:\n        os.kill(pid, 0)\n"
        "        reached.append(f'{pid} signal')\n    except OSError:\n        pass\n"
        "    if libc.ptrace(16, pid, 0, 0) == 0:\n        reached.append(f'{pid} ptrace')\n"
        "print('pids', len(os.listdir('/proc')), 'reached', reached)\n"
        "try:\n    os.kill(1, 9)\nexcept OSError:\n    pass\n"
        "def add(a, b):\n    return a + b\n"
    )
    result = run(run_tests(probe, TestSpec("", ("assert add(2, 3) == 5",), ("add",))))
    assert result.outcome == "pass", result
    assert ("reached []" if runner.backend() == "root" else "reached ['1 signal']") in result.stdout, result.stdout
