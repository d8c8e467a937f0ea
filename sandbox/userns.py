"""The code sandbox without root: user namespaces stand in for root, a PID namespace for the judge's own uid.

Chosen automatically when the evaluator is not root, or is the root of a user namespace that lacks the
throwaway uids (a rootless container) (sandbox/runner.py). `unshare --user --map-root-user` gives
PID 1 (sandbox/pid1.py) root inside a user namespace of its own, enough to build the same private tmpfs
root in the same fresh PID, network, mount, IPC and UTS namespaces. The kernel has one uid for the whole run
(the evaluator's), so the separations the root backend gets from two throwaway uids come from namespaces:
- the judge runs in a user namespace of its own as a non-zero uid (its exec drops every capability);
- the program runs in a user namespace of its own (non-zero uid, no capabilities after exec) AND a PID,
  mount and IPC namespace of its own: it cannot see the judge, PID 1 or the host, so it can neither signal,
  trace nor read them through /proc. Its PID 1 is a reaper exec'd fresh (it holds nothing of the run),
  non-dumpable, and as that namespace's init it ignores every signal the program can send it;
- its mount namespace covers the judge's spec with an empty read-only tmpfs; the sandbox's root, the
  harness and the system binds are read-only mounts, and the program's caps-free, locked copy cannot
  unmount or remount them. Only the scratch directory is writable. Being chrooted, it cannot create user
  namespaces of its own either (the kernel refuses CLONE_NEWUSER in a chroot).
What it cannot give without root: cgroups, unless that user may create groups beside its own (a delegated
cgroup v2 subtree; untested here) (else memory is capped per process by RLIMIT_AS, not per run, and CPU is
shared per process, not per run; the reason is logged once); a per-run process cap needs Linux >= 5.14
(RLIMIT_NPROC counted per user namespace; older kernels count all of the evaluator's processes together);
the program shares the evaluator's kernel uid, so read-only binds show it files that user owns (the
interpreter's prefix, if it lives in a home directory); the host must allow unprivileged user namespaces,
which widens the kernel surface open to every local user. It refuses (SandboxUnavailable) where user
namespaces are off, naming the sysctl (`problem`), and where a probe run fails, e.g. a /proc masked as in a
default Docker container, which forbids mounting a new proc.
The functions below `problem` run inside PID 1: standard library only, sent as source with its own.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x08000000, 0x10000000, 0x20000000
INNER_UID = 1000  # each side's uid inside its own user namespace: not 0, so its exec drops every capability
# The processes a program side holds in its user namespace before the program runs: the relay and the reaper.
HELPERS = 2
# PID 1 of the program's namespace: non-dumpable (no ptrace, no /proc/1/mem or fd), it starts the program,
# reaps orphans, and writes the program's fate to its fd (argv[1]) for the relay outside.
REAPER = """import ctypes, os, sys
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
fate = int(sys.argv[1])
pid = os.fork()
if pid == 0:
    try:
        os.close(fate)
        os.execv(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
while True:
    child, status = os.wait()
    if child == pid:
        signalled = os.WIFSIGNALED(status)
        how = 'signal %d' % os.WTERMSIG(status) if signalled else 'exit %d' % os.waitstatus_to_exitcode(status)
        os.write(fate, how.encode())
        os._exit(0)
"""
SYSCTL_DIR = "/proc/sys"
_SYSCTLS = (  # (file under /proc/sys, the value that forbids unprivileged user namespaces, what to set instead)
    ("kernel/unprivileged_userns_clone", "0", "1"),
    ("user/max_user_namespaces", "0", "a number above 0"),
    ("kernel/apparmor_restrict_unprivileged_userns", "1", "0"),
)
PROBE_HINT = (
    "the unprivileged sandbox needs user namespaces with a mountable /proc (check the sysctls "
    "user.max_user_namespaces, kernel.unprivileged_userns_clone and kernel.apparmor_restrict_unprivileged_userns), "
    "or a worker that runs as root"
)


def problem() -> str | None:
    """The kernel setting that forbids this user to create user namespaces, in one line; None if none does."""
    for name, forbidding, wanted in _SYSCTLS:
        try:
            with open(os.path.join(SYSCTL_DIR, name)) as f:
                value = f.read().strip()
        except OSError:  # absent on this kernel: it does not restrict anything
            continue
        if value == forbidding:
            setting = name.replace("/", ".")
            return (
                f"unprivileged user namespaces are off (sysctl {setting}={value}): set it to {wanted}, "
                "or run the worker as root"
            )
    return None


def enter_userns(flags: int) -> None:
    """Move this (single-threaded) process into a new user namespace, plus `flags`, as INNER_UID there."""
    if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWUSER | flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")
    for name, line in (("setgroups", "deny"), ("uid_map", f"{INNER_UID} 0 1"), ("gid_map", f"{INNER_UID} 0 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(line)


def enter_program_namespaces() -> int:
    """Split into a relay (stays here, mirrors the program's fate as its own) and the namespace's PID 1.

    Returns only in the new PID 1, with the fd the reaper it becomes reports the program's fate on.
    """
    enter_userns(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC)
    fate_r, fate_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(fate_r)
        return fate_w
    # The relay keeps no pipe of the run: the judge must see EOF when the program dies.
    os.closerange(3, fate_r)
    os.closerange(fate_r + 1, 65536)
    fate = b""
    while chunk := os.read(fate_r, 64):
        fate += chunk
    _, status = os.waitpid(pid, 0)
    how, _, number = fate.decode().partition(" ")
    if how == "exit":
        os._exit(int(number))
    sig = int(number) if how == "signal" else os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    if not sig:
        os._exit(os.waitstatus_to_exitcode(status))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if sig != signal.SIGKILL:
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)
