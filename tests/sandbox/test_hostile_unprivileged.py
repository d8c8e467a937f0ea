"""The sandbox without root: chosen by the euid, refusing in one line, and passing the hostile suites as nobody."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from envs.base import REPO_ROOT
from sandbox import launch, runner, userns
from sandbox.runner import SandboxUnavailable, run_python

NOBODY = 65534
SUITES = ("tests/sandbox/test_hostile.py", "tests/sandbox/test_hostile_limits.py", "tests/sandbox/test_sandbox.py")
SETPRIV = shutil.which("setpriv")
AS_NOBODY = [SETPRIV or "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def _config() -> dict[str, object]:
    cfg = runner._config("/usr/bin/python3", "/usr", 1.0, runner._limits(64, 4, 1, 2), 4, runner._caps(64, 4, 1))
    return {**cfg, "status_fd": 5}


def test_backend_follows_the_euid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner.os, "geteuid", lambda: 1000)
    cfg = _config()
    argv = launch.sandbox_argv(cfg)
    assert runner.backend() == "userns"
    assert (cfg["userns"], cfg["uid"], cfg["judge_uid"]) == (True, None, None)
    assert argv[1:4] == ["--user", "--map-root-user", "--pid"]
    monkeypatch.setattr(runner.os, "geteuid", lambda: 0)
    cfg = _config()
    assert (runner.backend(), cfg["userns"], cfg["judge_uid"]) == ("root", False, cfg["uid"] + 1)  # type: ignore[operator]
    assert runner.UID_MIN <= cfg["uid"] < runner.UID_MIN + runner.UID_SPAN  # type: ignore[operator]
    assert "--user" not in launch.sandbox_argv(cfg)
    # root in a rootless container's user namespace has no throwaway uids to switch to
    monkeypatch.setattr(
        runner, "_own_uid_map", lambda: "         0       1000          1\n         1     100000      65536\n"
    )
    assert runner.backend() == "userns"
    assert runner.covers_throwaway_uids("         0          0 4294967295\n")


@pytest.mark.parametrize(
    ("name", "value", "setting"),
    [
        ("kernel/unprivileged_userns_clone", "0", "kernel.unprivileged_userns_clone=0"),
        ("user/max_user_namespaces", "0", "user.max_user_namespaces=0"),
        ("kernel/apparmor_restrict_unprivileged_userns", "1", "kernel.apparmor_restrict_unprivileged_userns=1"),
    ],
)
def test_refusal_names_the_kernel_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, value: str, setting: str
) -> None:
    for allowed, content in (("kernel/unprivileged_userns_clone", "1"), ("user/max_user_namespaces", "15000")):
        (tmp_path / allowed).parent.mkdir(exist_ok=True)
        (tmp_path / allowed).write_text(content + "\n")
    monkeypatch.setattr(userns, "SYSCTL_DIR", str(tmp_path))
    assert userns.problem() is None  # allowed, and apparmor's knob absent (a kernel without it)
    (tmp_path / name).parent.mkdir(exist_ok=True)
    (tmp_path / name).write_text(value + "\n")
    monkeypatch.setattr(runner.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(runner, "_problem", {})
    with pytest.raises(SandboxUnavailable) as refused:
        asyncio.run(run_python("print(1)"))
    line = str(refused.value)
    assert f"(sysctl {setting})" in line and "run the worker as root" in line and "\n" not in line
    monkeypatch.setattr(runner.os, "geteuid", lambda: 0)
    monkeypatch.setattr(runner, "_problem", {})
    assert "sysctl" not in (runner._static_problem(runner.default_interpreter()[0]) or "")  # root needs no userns


def test_a_failed_unprivileged_probe_says_what_to_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(userns, "SYSCTL_DIR", "/nonexistent")
    monkeypatch.setattr(runner, "_problem", {})
    monkeypatch.setattr(launch, "init_source", lambda: "import sys; sys.exit('no /proc for you')")
    problem = asyncio.run(runner.sandbox_problem())
    assert problem is not None and userns.PROBE_HINT in problem and "no /proc for you" in problem


@contextlib.contextmanager
def _traversable_by_nobody(*paths: Path) -> Iterator[None]:
    """Let nobody traverse the directories above `paths` (a clone under a 0700 temp dir, say): o+x on the
    ancestors that lack it, for the test's duration; the modes are restored after."""
    changed: dict[Path, int] = {}
    for path in paths:
        for folder in [path, *path.parents]:
            mode = folder.stat().st_mode
            if folder not in changed and not mode & stat.S_IXOTH:
                changed[folder] = mode
                folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
    try:
        yield
    finally:
        for folder, mode in changed.items():
            folder.chmod(stat.S_IMODE(mode))


def _usable_by_nobody(path: str) -> bool:
    return subprocess.run([*AS_NOBODY, "/usr/bin/test", "-x", path]).returncode == 0


def _interpreters() -> tuple[list[str], dict[str, str]]:
    """The Python that runs the suites as nobody (this one, else the system's of the same version on this
    one's packages), and the environment it needs."""
    if _usable_by_nobody(sys.executable):
        return [sys.executable], {}
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.path.exists(system) or not _usable_by_nobody(system):
        pytest.skip(f"nobody can run neither {sys.executable} nor {system}")
    paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], str(REPO_ROOT)])
    return [system], {"PYTHONPATH": os.pathsep.join(paths)}


@pytest.mark.skipif(os.geteuid() != 0, reason="not root: the hostile suites themselves run on the unprivileged backend")
@pytest.mark.skipif(SETPRIV is None, reason="setpriv (util-linux) is missing")
def test_the_hostile_suites_pass_without_root() -> None:
    with _traversable_by_nobody(REPO_ROOT, Path(sys.prefix), Path(sys.executable).resolve().parent):
        _hostile_suites_as_nobody()


def _hostile_suites_as_nobody() -> None:
    python, env = _interpreters()
    sandbox_python = runner.default_interpreter()[0]
    sandbox_python = sandbox_python if _usable_by_nobody(sandbox_python) else os.path.realpath(python[0])
    with tempfile.TemporaryDirectory() as home:
        os.chown(home, NOBODY, NOBODY)
        env = {"PATH": launch.SAFE_PATH, "LANG": "C.UTF-8", "HOME": home, "EVALFLOW_ALLOW_SKIPS": "1", **env}
        env["EVALFLOW_SANDBOX_PYTHON"] = sandbox_python
        check = "from sandbox.runner import backend, default_interpreter as d, _static_problem as p\n"
        check += "print(backend(), p(d()[0]))"
        backend = subprocess.run(
            [*AS_NOBODY, *python, "-c", check], env=env, cwd=REPO_ROOT, capture_output=True, text=True
        )
        assert backend.stdout.split() == ["userns", "None"], backend.stderr[-2000:]
        args = ["-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "0", "-m", "not e2e", "-rs", *SUITES]
        inner = subprocess.run([*AS_NOBODY, *python, *args], env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                               timeout=300)  # fmt: skip
    summary = inner.stdout.strip().splitlines()[-1] if inner.stdout.strip() else ""
    assert inner.returncode == 0, inner.stdout[-6000:] + inner.stderr[-2000:]
    passed = int(re.search(r"(\d+) passed", summary)[1])  # type: ignore[index]
    skips = [line for line in inner.stdout.splitlines() if line.startswith("SKIPPED")]
    # Only what needs a cgroup may be left out: this machine gives nobody none (sandbox/userns.py).
    assert all("needs a cgroup" in line for line in skips), skips
    assert passed >= 50 and len(skips) <= 3, summary
