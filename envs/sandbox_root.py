"""PID 1 of the code sandbox (envs/sandbox.py): private root, throwaway uid, timeout, the program's fate.

It builds the sandbox's root, runs the program as a throwaway uid, enforces the timeout and reports
what happened on a pipe.

This code runs inside the namespaces as root under `python -I -S`, so it uses the standard library
only, and `init_source` sends it as source text: the sandbox's interpreter imports only what it needs
(about 20 ms) instead of evalflow and its dependencies.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import inspect
import os
import resource
import signal
import time
from typing import Any

PROGRAM_NAME = "main.py"

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND = 32, 4096
PR_SET_NO_NEW_PRIVS = 38
_ROOT_DIRS = ("usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
_DEV_NODES = ("null", "zero", "full", "random", "urandom")


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    if _libc().mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} -> {target}: {os.strerror(err)}")


def _bind_ro(source: str, target: str) -> None:
    _mount(source, target, None, MS_BIND)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _build_root(root: str, cfg: dict[str, Any], program: bytes) -> str:
    """Turn `root` (the host scratch dir) into the sandbox's whole filesystem; returns the work dir."""
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['disk_mb']}m,mode=755")
    for name in _ROOT_DIRS:
        host = "/" + name
        if os.path.islink(host):
            os.symlink(os.readlink(host), root + host)
        elif os.path.isdir(host):
            os.mkdir(root + host)
            _bind_ro(host, root + host)
    prefix = cfg["prefix"]
    if prefix.strip("/") and not any(prefix == "/" + d or prefix.startswith(f"/{d}/") for d in _ROOT_DIRS):
        os.makedirs(root + prefix, mode=0o755)
        _bind_ro(prefix, root + prefix)
    os.mkdir(root + "/dev", 0o755)
    for node in _DEV_NODES:
        open(f"{root}/dev/{node}", "w").close()
        _mount(f"/dev/{node}", f"{root}/dev/{node}", None, MS_BIND)
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", f"{root}/dev/{name}")
    os.symlink("/proc/self/fd", f"{root}/dev/fd")
    os.mkdir(root + "/proc", 0o555)
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    workdir = cfg["scratch"]
    os.makedirs(root + workdir, mode=0o755)
    uid = cfg["uid"]
    for path, mode in ((workdir, 0o700), (workdir + "/tmp", 0o700)):
        os.makedirs(root + path, mode=mode, exist_ok=True)
        os.chown(root + path, uid, uid)
    with open(f"{root}{workdir}/{PROGRAM_NAME}", "wb") as f:
        f.write(program)
    os.chown(f"{root}{workdir}/{PROGRAM_NAME}", uid, uid)
    return workdir


def _exec_program(cfg: dict[str, Any], status_fd: int) -> None:
    """In the forked child: limits, drop to the throwaway uid, exec the interpreter. Never returns."""
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
        for name, value in cfg["limits"].items():
            resource.setrlimit(getattr(resource, name), (value, value))
        uid = cfg["uid"]
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # as root this also clears every capability
        if _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        os.umask(0o077)
        python = cfg["python"]
        os.execve(python, [python, "-I", "-S", PROGRAM_NAME], cfg["env"])
    except BaseException as e:
        os.write(status_fd, f"error cannot start the program: {e!r}\n".encode())
    finally:
        os._exit(127)


def _wait_for(pid: int, timeout_s: float) -> int | None:
    """Wait status of `pid`, reaping orphans meanwhile; None at the timeout. SIGCHLD must be blocked."""
    deadline = time.monotonic() + timeout_s
    while True:
        while True:  # reap everything that has exited
            reaped, status = os.waitpid(-1, os.WNOHANG)
            if reaped == pid:
                return status
            if reaped == 0:
                break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        signal.sigtimedwait([signal.SIGCHLD], remaining)


def _init_main(cfg: dict[str, Any]) -> None:
    status_fd = cfg["status_fd"]
    os.set_inheritable(status_fd, False)  # closed in the program at exec

    def report(line: str) -> None:
        os.write(status_fd, (line + "\n").encode())

    try:
        report(f"ns {os.stat('/proc/self/ns/pid').st_ino}")
        with open(os.path.join(cfg["scratch"], PROGRAM_NAME), "rb") as f:
            program = f.read()
        workdir = _build_root(cfg["scratch"], cfg, program)
        os.chroot(cfg["scratch"])
        os.chdir(workdir)
    except Exception as e:
        report(f"error setup failed: {e!r}")
        return
    # Blocked before the fork so that no exit goes unnoticed; the program unblocks it before exec.
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
    pid = os.fork()
    if pid == 0:
        _exec_program(cfg, status_fd)
    status = _wait_for(pid, cfg["timeout_s"])
    # Whatever the program left behind (background children, setsid daemons) dies with it.
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        while True:
            os.waitpid(-1, 0)
    if status is None:
        report("timeout")
    elif os.WIFSIGNALED(status):
        report(f"signal {os.WTERMSIG(status)}")
    else:
        report(f"exit {os.waitstatus_to_exitcode(status)}")


_INIT_CONSTANTS = ("PROGRAM_NAME", "MS_RDONLY", "MS_NOSUID", "MS_NODEV", "MS_NOEXEC", "MS_REMOUNT", "MS_BIND")
_INIT_CONSTANTS += ("PR_SET_NO_NEW_PRIVS", "_ROOT_DIRS", "_DEV_NODES")
_INIT_CODE = (_libc, _mount, _bind_ro, _build_root, _exec_program, _wait_for, _init_main)


@functools.cache
def init_source() -> str:
    """PID 1's program: the functions above, then a call of `_init_main` with the JSON config in argv[1]."""
    lines = [
        "from __future__ import annotations",
        "import contextlib, ctypes, json, os, resource, signal, sys, time",
        *(f"{name} = {globals()[name]!r}" for name in _INIT_CONSTANTS),
        *(inspect.getsource(obj) for obj in _INIT_CODE),
        "_init_main(json.loads(sys.argv[1]))",
    ]
    return "\n".join(lines)
