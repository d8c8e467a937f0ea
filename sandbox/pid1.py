"""PID 1 of the code sandbox (sandbox/runner.py): private root, cgroup, throwaway uids, timeout, the run's fate.

It reads the run (program text, harness files, the judge's tests) from its stdin, builds the sandbox's
root on a size-capped tmpfs mounted over /tmp in its private mount namespace (so nothing of the run is
ever on the host's disk), creates the run's cgroup, and forks: the program as one throwaway uid, and in a
judged run the judge as another uid that alone holds the tests and the status pipe. Each child joins the
cgroup, chroots, drops to its uid and execs `python -I -S`. PID 1 then waits for the judge (else the
program), the timeout, an OOM kill in the group, or its parent's death (its stdin closes), kills every
process of the namespace, reports on the status pipe and removes the cgroup. Without root (cfg "userns")
each child enters user namespaces of its own instead of dropping to a uid, and the program a PID namespace
too, under a reaper (sandbox/userns.py); the root is then read-only but for the program's scratch dir.

This code runs inside the namespaces as root under `python -I -S`, so it uses the standard library
only, and `init_source` sends it as source text (with sandbox/cgroup.py's and sandbox/userns.py's
functions): the sandbox's interpreter imports only what it needs (about 20 ms) instead of evalflow and its
dependencies.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import inspect
import json
import os
import resource
import select
import signal
import time
from typing import Any

from sandbox import cgroup, userns
from sandbox.cgroup import cg_create, cg_join, cg_oom_kills, cg_peak_bytes, cg_remove
from sandbox.userns import HELPERS, REAPER, enter_program_namespaces, enter_userns

PROGRAM_NAME = "main.py"
MOUNTPOINT = "/tmp"  # covered only inside PID 1's private mount namespace; the sandbox's root
WORKDIR = "/sandbox"  # the program's home, cwd and only writable place
HARNESS_DIR = "/harness"  # root-owned, read-only to both children
JUDGE_SPEC = "/judge/spec.json"  # readable by the judge's uid only
REQUEST_FD, REPLY_FD, STATUS_FD = 3, 4, 5  # the children's fd layout (sandbox/harness_*.py)
BOOT = "import sys; sys.path.insert(0, {dir!r}); from sandbox.{module} import main; main(*sys.argv[1:])"
POLL_S = 0.02  # how often PID 1 looks at the cgroup's OOM counter
EXIT_GRACE_S = 0.2  # after the judge is done, the program may still flush its output
SPEC_HEADER = 8

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
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


def _mounts_below(target: str) -> list[str]:
    """Mount points strictly below `target`, from this process' mountinfo."""
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):  # mountinfo's escapes
        points = [point.replace(code, char) for point in points]
    return [point for point in points if point.startswith(target.rstrip("/") + "/")]


def _bind_ro(source: str, target: str, recursive: bool = False) -> None:
    """Bind `source` read-only at `target`; recursive (as a user namespace must, where submounts are locked)
    also makes every mount below read-only. noexec is kept: a user namespace may not clear a locked flag."""
    _mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    for point in [target, *(_mounts_below(target) if recursive else [])]:
        keep = MS_NOEXEC if os.statvfs(point).f_flag & os.ST_NOEXEC else 0
        _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | keep)


def _read_spec(fd: int) -> dict[str, Any]:
    """The run as the parent wrote it on PID 1's stdin: an 8-byte length, then JSON (the pipe stays open)."""

    def exactly(size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = os.read(fd, size - len(data))
            if not chunk:
                raise EOFError("the parent closed the pipe before sending the run")
            data += chunk
        return data

    return json.loads(exactly(int.from_bytes(exactly(SPEC_HEADER), "big")))


def _write_file(path: str, data: str, uid: int | None, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with open(fd, "wb") as f:
        f.write(data.encode("utf-8", errors="replace"))  # model output may hold lone surrogates
    if uid is not None:  # None: a user namespace, whose one uid owns everything already
        os.chown(path, uid, uid)


def _build_root(cfg: dict[str, Any], spec: dict[str, Any]) -> str:
    """Mount the tmpfs root over MOUNTPOINT and fill it: read-only system dirs, /dev, /proc, the files."""
    sources = [d for d in _ROOT_DIRS if os.path.isdir("/" + d) and not os.path.islink("/" + d)]
    prefix = cfg["prefix"]
    if prefix.strip("/") and not any(prefix == "/" + d or prefix.startswith(f"/{d}/") for d in _ROOT_DIRS):
        sources.append(prefix.strip("/"))
    # Opened before the tmpfs covers MOUNTPOINT, in case one of them lies below it.
    handles = {name: os.open("/" + name, os.O_PATH | os.O_DIRECTORY) for name in sources}
    links = {d: os.readlink("/" + d) for d in _ROOT_DIRS if os.path.islink("/" + d)}
    root = MOUNTPOINT
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['disk_mb']}m,mode=755")
    for name, target in links.items():
        os.symlink(target, f"{root}/{name}")
    for name, fd in handles.items():
        os.makedirs(f"{root}/{name}", mode=0o755)
        _bind_ro(f"/proc/self/fd/{fd}", f"{root}/{name}", recursive=cfg["userns"])
        os.close(fd)
    os.mkdir(root + "/dev", 0o755)
    for node in _DEV_NODES:
        open(f"{root}/dev/{node}", "w").close()
        _mount(f"/dev/{node}", f"{root}/dev/{node}", None, MS_BIND)
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", f"{root}/dev/{name}")
    os.symlink("/proc/self/fd", f"{root}/dev/fd")
    os.mkdir(root + "/proc", 0o555)
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    uid, judge_uid = cfg["uid"], cfg["judge_uid"]
    for path in (WORKDIR, WORKDIR + "/tmp"):
        os.mkdir(root + path, 0o700)
        if uid is not None:
            os.chown(root + path, uid, uid)
    _write_file(f"{root}{WORKDIR}/{PROGRAM_NAME}", spec["program"], uid, 0o600)
    for relpath, text in spec["files"].items():
        os.makedirs(os.path.dirname(f"{root}{HARNESS_DIR}/{relpath}"), mode=0o755, exist_ok=True)
        _write_file(f"{root}{HARNESS_DIR}/{relpath}", text, 0, 0o644)
    if spec["judge"] is not None:
        os.mkdir(root + os.path.dirname(JUDGE_SPEC), 0o700)
        if judge_uid is not None:
            os.chown(root + os.path.dirname(JUDGE_SPEC), judge_uid, judge_uid)
        _write_file(root + JUDGE_SPEC, json.dumps(spec["judge"]), judge_uid, 0o400)
    if cfg["userns"]:  # the program's uid owns the whole tree here: only its scratch dir stays writable
        _mount(root + WORKDIR, root + WORKDIR, None, MS_BIND)
        _mount(None, root, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return root


def _spawn(cfg: dict[str, Any], role: str, argv: list[str], fds: dict[int, int], cwd: str) -> int:
    """Fork a child that joins the run's cgroup, chroots, drops to its uid and execs `argv`; its pid."""
    pid = os.fork()
    if pid:
        return pid
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        cg_join(cfg["cgroup_dirs"])
        judge = role == "judge"
        if not judge:  # an OOM kill takes the program first (lowering the judge's would need CAP_SYS_RESOURCE)
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        limits = dict(cfg["limits"])
        if cfg["userns"] and judge:
            enter_userns(0)
        elif cfg["userns"]:
            fate = enter_program_namespaces()  # from here on, PID 1 of the program's own PID namespace
            _mount("proc", cfg["root"] + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            if os.path.isdir(cfg["root"] + os.path.dirname(JUDGE_SPEC)):
                _mount("tmpfs", cfg["root"] + os.path.dirname(JUDGE_SPEC), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV)
            fds = {**fds, max(fds) + 1: fate}
            argv = [argv[0], "-I", "-S", "-c", REAPER, str(max(fds)), *argv]
            limits["RLIMIT_NPROC"] += HELPERS
        os.chroot(cfg["root"])
        os.chdir(cwd)
        for name, value in limits.items():
            resource.setrlimit(getattr(resource, name), (value, value))
        if not cfg["userns"]:
            uid = cfg["judge_uid"] if judge else cfg["uid"]
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)  # as root this also clears every capability
        if _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        os.umask(0o077)
        # Out of the way first, so that no target number clobbers a source still to be placed.
        moved = {target: fcntl.fcntl(source, fcntl.F_DUPFD, 64) for target, source in fds.items()}
        for target, source in moved.items():
            os.dup2(source, target)
        os.closerange(max(fds) + 1, 65536)  # the status pipe (unless placed above) and every other fd of PID 1
        os.execve(argv[0], argv, cfg["env"] if not judge else {**cfg["env"], "HOME": "/"})
    except BaseException as e:
        os.write(cfg["status_fd"], f"error cannot start the {role}: {e!r}\n".encode())
    finally:
        os._exit(127)


def _reap(children: dict[int, str], statuses: dict[str, int]) -> None:
    """Collect every exited child (orphans of the namespace included) without blocking."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in children:
            statuses[children[pid]] = status


def _supervise(cfg: dict[str, Any], children: dict[int, str], main: str, wake: int) -> tuple[str, dict[str, int]]:
    """Wait until `main` exits, the timeout, an OOM kill, or the parent's death; (why it ended, statuses)."""
    statuses: dict[str, int] = {}
    deadline = time.monotonic() + cfg["timeout_s"]
    poller = select.poll()
    poller.register(wake, select.POLLIN)
    poller.register(0, select.POLLIN)  # POLLHUP: the parent died (nothing else is ever written there)
    plan, dirs = cfg["cgroup"], cfg["cgroup_dirs"]
    while True:
        _reap(children, statuses)
        if main in statuses:
            return "finished", statuses
        if plan and cg_oom_kills(plan, dirs):
            return "oom", statuses
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout", statuses
        for fd, event in poller.poll(min(remaining, POLL_S) * 1000):
            if fd == 0 and event & (select.POLLHUP | select.POLLERR):
                return "orphaned", statuses
            with contextlib.suppress(BlockingIOError):
                os.read(fd, 4096)


def _start_children(cfg: dict[str, Any], spec: dict[str, Any]) -> dict[int, str]:
    """Fork the program, and in a judged run first the judge with the pipes between them; {pid: role}."""
    python, null = cfg["python"], os.open("/dev/null", os.O_RDONLY)
    if spec["judge"] is None:
        return {_spawn(cfg, "program", [python, "-I", "-S", PROGRAM_NAME], {0: null, 1: 1, 2: 2}, WORKDIR): "program"}
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    boot = [python, "-I", "-S", "-c"]
    judge = [*boot, BOOT.format(dir=HARNESS_DIR, module="harness_judge"), JUDGE_SPEC]
    runner = [*boot, BOOT.format(dir=HARNESS_DIR, module="harness_runner")]
    judge_fds = {0: null, 1: 1, 2: 2, REQUEST_FD: request_w, REPLY_FD: reply_r, STATUS_FD: cfg["status_fd"]}
    children = {_spawn(cfg, "judge", judge, judge_fds, "/"): "judge"}
    runner_fds = {0: null, 1: 1, 2: 2, REQUEST_FD: request_r, REPLY_FD: reply_w}
    children[_spawn(cfg, "program", runner, runner_fds, WORKDIR)] = "program"
    for fd in (request_r, request_w, reply_r, reply_w, null):
        os.close(fd)
    return children


def _init_main(cfg: dict[str, Any]) -> None:
    status_fd = cfg["status_fd"]
    os.set_inheritable(status_fd, False)

    def report(line: str) -> None:
        with contextlib.suppress(OSError):  # a parent that died reads nothing; the run still gets cleaned up
            os.write(status_fd, (line + "\n").encode())

    report(f"ns {os.stat('/proc/self/ns/pid').st_ino}")
    plan, dirs = cfg["cgroup"], []
    cfg["cgroup_dirs"] = dirs
    reason, statuses = "error", {}
    try:
        spec = _read_spec(0)
        if plan:
            dirs = cfg["cgroup_dirs"] = cg_create(plan, cfg["cgroup_name"], **cfg["cgroup_limits"])
        cfg["root"] = _build_root(cfg, spec)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(wake_w)
        children = _start_children(cfg, spec)
        reason, statuses = _supervise(cfg, children, "program" if spec["judge"] is None else "judge", wake_r)
        grace = time.monotonic() + EXIT_GRACE_S
        while reason == "finished" and "program" not in statuses and time.monotonic() < grace:
            time.sleep(0.01)
            _reap(children, statuses)
    except Exception as e:
        report(f"error the sandbox's init failed: {e!r}")
    finally:
        # Whatever the run left behind (background children, setsid daemons) dies with it.
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while True:
                os.waitpid(-1, 0)
        if plan:
            stats = f"cgroup oom_kills={cg_oom_kills(plan, dirs)} peak={cg_peak_bytes(plan, dirs)}"
            if left := cg_remove(dirs):
                report(f"error cannot remove cgroups {left}")
            report(stats)
    for role, status in statuses.items():
        fate = (
            f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.waitstatus_to_exitcode(status)}"
        )
        report(f"{role} {fate}")
    report(f"end {reason}")


_INIT_CONSTANTS = ("PROGRAM_NAME", "MOUNTPOINT", "WORKDIR", "HARNESS_DIR", "JUDGE_SPEC", "REQUEST_FD", "REPLY_FD")
_INIT_CONSTANTS += ("STATUS_FD", "BOOT", "POLL_S", "EXIT_GRACE_S", "SPEC_HEADER", "MS_RDONLY", "MS_NOSUID")
_INIT_CONSTANTS += ("MS_NODEV", "MS_NOEXEC", "MS_REMOUNT", "MS_BIND", "MS_REC", "PR_SET_NO_NEW_PRIVS", "_ROOT_DIRS")
_INIT_CONSTANTS += ("_DEV_NODES",)
_INIT_CODE = (_libc, _mount, _mounts_below, _bind_ro, _read_spec, _write_file, _build_root, _spawn, _reap, _supervise)
_INIT_CODE += (_start_children, _init_main)
_CGROUP_CODE = (cgroup._write, cgroup._counter, cg_create, cg_join, cg_oom_kills, cg_peak_bytes)
_CGROUP_CODE += (cg_remove,)
_USERNS_CONSTANTS = ("CLONE_NEWNS", "CLONE_NEWIPC", "CLONE_NEWUSER", "CLONE_NEWPID", "INNER_UID", "HELPERS", "REAPER")
_USERNS_CODE = (enter_userns, enter_program_namespaces)


@functools.cache
def init_source() -> str:
    """PID 1's program: the functions above, then a call of `_init_main` with the JSON config in argv[1]."""
    lines = [
        "from __future__ import annotations",
        "import contextlib, ctypes, fcntl, json, os, resource, select, signal, sys, time",
        f"CPU_PERIOD_US = {cgroup.CPU_PERIOD_US!r}",
        *(f"{name} = {getattr(userns, name)!r}" for name in _USERNS_CONSTANTS),
        *(f"{name} = {globals()[name]!r}" for name in _INIT_CONSTANTS),
        *(inspect.getsource(obj) for obj in (*_CGROUP_CODE, *_USERNS_CODE, *_INIT_CODE)),
        "_init_main(json.loads(sys.argv[1]))",
    ]
    return "\n".join(lines)
