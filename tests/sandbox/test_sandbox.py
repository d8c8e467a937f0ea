"""The sandbox against hostile programs: each attack must end in its own outcome and leave nothing behind."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import time
import uuid
from collections.abc import Coroutine
from typing import Any

import pytest

from envs.base import REPO_ROOT
from sandbox import launch, runner
from sandbox.runner import SandboxResult, SandboxUnavailable, TestSpec, run_python, run_tests

STATIC_PROBLEM = runner._static_problem(runner.default_interpreter()[0])
pytestmark = pytest.mark.skipif(STATIC_PROBLEM is not None, reason=f"no sandbox here: {STATIC_PROBLEM}")


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


def sandbox_pids() -> list[int]:
    """Processes of a sandbox, found by scanning /proc: as root a sandbox uid marks them, without root (one uid
    for all) a user namespace other than this process' (a sandbox's reaper is not even readable here)."""
    own_ns = os.readlink("/proc/self/ns/user")
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
            if runner.backend() == "userns":
                if uid == os.getuid() and os.readlink(f"/proc/{entry}/ns/user") != own_ns:
                    pids.append(int(entry))
            elif runner.UID_MIN <= uid < runner.UID_MIN + runner.UID_SPAN:
                pids.append(int(entry))
        except (OSError, StopIteration):
            continue
    return pids


def pids_with(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry != str(os.getpid()):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def sleeper(marker: str) -> list[str]:
    """argv of a process that sleeps for 5 minutes with `marker` in its command line (`sleep` rejects extras)."""
    return ["python3", "-c", "import time; time.sleep(300)", marker]


def wait_until_gone(find: Any, timeout_s: float = 3.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := find()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_sandbox_works_here() -> None:
    assert run(runner.sandbox_problem()) is None


def test_pass_and_fail() -> None:
    ok = run(run_python("print('hello')"))
    assert (ok.outcome, ok.returncode, ok.stdout, ok.sandboxed) == ("pass", 0, "hello\n", True)
    bad = run(run_python("assert 1 + 1 == 3, 'arithmetic'"))
    assert (bad.outcome, bad.returncode) == ("fail", 1)
    assert "AssertionError: arithmetic" in bad.stderr
    assert run(run_python("import sys; sys.exit(3)")).returncode == 3


def test_infinite_loop_times_out() -> None:
    start = time.monotonic()
    result = run(run_python("while True:\n    pass", timeout_s=1.0))
    elapsed = time.monotonic() - start
    assert result.outcome == "timeout" and result.returncode is None
    assert elapsed < 1.0 + 2.0
    assert not wait_until_gone(sandbox_pids)


def test_fork_bomb_is_contained() -> None:
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    # A neighbour that needs processes of its own: each run has its own uid, so the bomb cannot starve it.
    neighbour = (
        "import subprocess, time\ntime.sleep(0.5)\nprint(subprocess.run(['echo', 'ok'], capture_output=True).stdout)"
    )

    async def both() -> tuple[SandboxResult, SandboxResult]:
        return await asyncio.gather(run_python(bomb, timeout_s=2.0, max_processes=16), run_python(neighbour))

    start = time.monotonic()
    bombed, other = run(both())
    assert bombed.outcome == "timeout"
    assert time.monotonic() - start < 2.0 + 2.0
    assert (other.outcome, other.stdout) == ("pass", "b'ok\\n'\n")
    assert not wait_until_gone(sandbox_pids)


def test_process_limit() -> None:
    code = (
        "import subprocess\nprocs, refused = [], 0\nfor _ in range(40):\n    try:\n"
        "        procs.append(subprocess.Popen(['sleep', '30']))\n    except OSError:\n        refused += 1\n"
        "print(len(procs), refused)\n"
    )
    result = run(run_python(code, timeout_s=10.0, max_processes=8))
    started, refused = map(int, result.stdout.split())
    assert result.outcome == "pass" and started < 8 and refused == 40 - started
    assert not wait_until_gone(sandbox_pids)  # the sleepers die with the run


def test_memory_bomb() -> None:
    big = run(run_python("x = bytearray(4 * 1024 ** 3)", memory_mb=256))
    assert big.outcome == "memory" and "MemoryError" in big.stderr
    growing = run(run_python("chunks = []\nwhile True:\n    chunks.append(b'x' * 2 ** 20)", memory_mb=256))
    assert growing.outcome in ("memory", "crash")


def test_cpu_limit_is_a_crash() -> None:
    result = run(run_python("while True:\n    pass", timeout_s=20.0, cpu_s=1))
    assert result.outcome == "crash" and result.returncode is not None and result.returncode < 0
    assert result.duration_s < 10


def test_segfault_is_a_crash() -> None:
    result = run(run_python("import ctypes\nctypes.string_at(0)"))
    assert (result.outcome, result.returncode) == ("crash", -11)


def test_writes_outside_the_scratch_dir_fail() -> None:
    token = uuid.uuid4().hex
    targets = [f"/tmp/evil-{token}", f"/var/tmp/evil-{token}", f"/dev/shm/evil-{token}", f"{REPO_ROOT}/evil-{token}"]
    code = (
        f"import os\nfor path in {targets!r}:\n    try:\n        open(path, 'w').write('pwned')\n"
        "    except OSError as e:\n        print('refused', type(e).__name__)\n"
        "    else:\n        print('WROTE', path)\n"
        "open('inside.txt', 'w').write('fine')\nprint(open('inside.txt').read(), os.getcwd() == os.environ['HOME'])\n"
    )
    result = run(run_python(code))
    assert result.outcome == "pass", result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(targets) + 1
    assert all(line.startswith("refused") for line in lines[:-1]), lines
    assert lines[-1] == "fine True"
    assert not any(os.path.exists(path) for path in targets)


def test_no_network_even_to_the_hosts_loopback() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        code = (
            "import socket\ntry:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "except OSError as e:\n    print('refused', e.errno)\nelse:\n    print('CONNECTED')\n"
        )
        result = run(run_python(code))
        assert result.outcome == "pass" and result.stdout.startswith("refused"), result.stdout + result.stderr
        with pytest.raises(BlockingIOError):
            server.accept()


def test_environment_is_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret-4f1c")
    monkeypatch.setenv("PREFECT_API_KEY", "fake-prefect-key-77aa")
    code = "import json, os\nprint(json.dumps(dict(os.environ)))\nprint(open('/proc/self/environ').read())"
    result = run(run_python(code))
    assert result.outcome == "pass"
    env = json.loads(result.stdout.splitlines()[0])
    assert set(env) == {"PATH", "LANG", "HOME", "TMPDIR", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED"}
    assert env["TMPDIR"].startswith(env["HOME"])
    assert "fake-secret" not in result.stdout and "fake-prefect" not in result.stdout


def test_cannot_see_host_processes_or_files() -> None:
    code = (
        "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\nprint(os.path.exists('/work'))"
    )
    result = run(run_python(code))
    pids, work = result.stdout.splitlines()
    assert json.loads(pids) == [1, 2]  # the namespace's init and the program itself
    assert work == "False" or not os.path.exists("/work")


def test_setsid_grandchild_is_killed_at_the_timeout() -> None:
    marker = f"sandbox-marker-{uuid.uuid4().hex}"
    code = (
        "import os, subprocess, time\n"
        "if os.fork() == 0:\n    os.setsid()\n"
        f"    subprocess.Popen({sleeper(marker)!r})\n    time.sleep(300)\n"
        "time.sleep(300)\n"
    )
    start = time.monotonic()
    result = run(run_python(code, timeout_s=1.5))
    assert result.outcome == "timeout" and time.monotonic() - start < 1.5 + 2.0
    assert not wait_until_gone(lambda: pids_with(marker))
    assert not wait_until_gone(sandbox_pids)


def test_daemon_left_behind_by_a_passing_program_is_killed() -> None:
    marker = f"sandbox-marker-{uuid.uuid4().hex}"
    code = f"import subprocess\nsubprocess.Popen(['setsid', *{sleeper(marker)!r}])\nprint('bye')"
    result = run(run_python(code))
    assert result.outcome == "pass"
    assert not wait_until_gone(lambda: pids_with(marker))


def test_twenty_in_parallel_keep_the_loop_responsive() -> None:
    async def main() -> tuple[list[SandboxResult], float, int]:
        ticks: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            while not stop.is_set():
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        tick_task = asyncio.create_task(ticker())
        programs = [f"import time\ntime.sleep(0.2)\nprint({i} * {i})" for i in range(20)]
        results = await asyncio.gather(*(run_python(p) for p in programs))
        stop.set()
        await tick_task
        gaps = [b - a for a, b in itertools.pairwise(ticks)]
        return results, max(gaps), len(ticks)

    results, max_gap, n_ticks = run(main())
    assert [r.outcome for r in results] == ["pass"] * 20
    assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(20)]
    assert n_ticks > 20
    assert max_gap < 0.5, f"event loop stalled for {max_gap:.2f} s"


def test_output_is_clipped() -> None:
    result = run(run_python("import sys\nsys.stdout.write('x' * 10_000_000)\nsys.stderr.write('tail-marker')"))
    assert result.outcome == "pass"
    assert len(result.stdout) <= launch.MAX_OUTPUT_BYTES + 100 and "bytes clipped" in result.stdout
    assert result.stderr.endswith("tail-marker")


def test_file_size_and_disk_limits() -> None:
    big_file = run(run_python("open('big', 'wb').write(b'x' * 3 * 2 ** 20)", max_file_mb=1))
    assert big_file.outcome == "fail" and "File too large" in big_file.stderr
    many_files = "for i in range(8):\n    open(f'f{i}', 'wb').write(b'x' * 2 ** 20)"
    full_disk = run(run_python(many_files, max_file_mb=2, disk_mb=4))
    assert full_disk.outcome == "fail" and "No space left" in full_disk.stderr


def test_cancellation_kills_the_run() -> None:
    async def main() -> None:
        task = asyncio.create_task(run_python("import time\ntime.sleep(60)", timeout_s=60.0))
        await asyncio.sleep(1.0)
        assert sandbox_pids()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert not wait_until_gone(sandbox_pids)


def test_backstop_kills_a_stuck_init(monkeypatch: pytest.MonkeyPatch) -> None:
    marker = f"stuck-init-{uuid.uuid4().hex}"
    stuck = (
        f"# {marker}\nimport json, os, sys, time\ncfg = json.loads(sys.argv[1])\n"
        "os.write(cfg['status_fd'], b'ns %d\\n' % os.stat('/proc/self/ns/pid').st_ino)\n"
        "if os.fork() == 0:\n    os.setsid()\n    time.sleep(300)\ntime.sleep(300)\n"
    )
    assert run(runner.sandbox_problem()) is None  # probed with the real init
    monkeypatch.setattr(launch, "init_source", lambda: stuck)
    monkeypatch.setattr(launch, "BACKSTOP_GRACE_S", 0.5)
    start = time.monotonic()
    result = run(run_python("pass", timeout_s=0.5))
    assert result.outcome == "timeout" and time.monotonic() - start < 4.0
    assert not pids_with(marker)  # the parent waited until the namespace was empty


def test_unavailable_sandbox_fails_loudly_unless_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    python = runner.default_interpreter()[0]
    monkeypatch.setitem(runner._problem, python, "no namespaces on this test machine")
    with pytest.raises(SandboxUnavailable, match=r"no namespaces on this test machine\..*allow_unsandboxed=True"):
        run(run_python("print(1)"))
    result = run(run_python("import os\nprint(sorted(os.environ))", allow_unsandboxed=True))
    assert result.outcome == "pass" and not result.sandboxed
    assert "AWS_SECRET_ACCESS_KEY" not in result.stdout
    assert run(run_python("while True:\n    pass", timeout_s=0.5, allow_unsandboxed=True)).outcome == "timeout"
    # Judged runs work there too (without the uid separation that makes them robust).
    spec = TestSpec("", ("assert add(1, 2) == 3", "assert add(2, 2) == 4"), ("add",))
    right = run(run_tests("def add(a, b):\n    return a + b\n", spec, allow_unsandboxed=True))
    assert (right.outcome, right.tests_passed, right.sandboxed) == ("pass", 2, False)
    wrong = run(run_tests("def add(a, b):\n    return 4\n", spec, allow_unsandboxed=True))
    assert (wrong.outcome, wrong.tests_passed, wrong.failures) == (
        "fail",
        1,
        ("assert add(1, 2) == 3: AssertionError",),
    )
    slow = run(run_tests("import time\ntime.sleep(30)\n", spec, timeout_s=0.5, allow_unsandboxed=True))
    assert slow.outcome == "timeout"
