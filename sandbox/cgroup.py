"""One cgroup per sandboxed run: memory, process and CPU caps over the whole tree, on cgroup v2 or else v1.

The parent picks the hierarchy once per process (`plan`, which says why when neither works); PID 1 of each
run (sandbox/pid1.py) creates the run's group (`cg_create`), puts every child it forks into it before
that child runs anything, counts OOM kills in it while the run lasts, and removes it at the end; the
parent removes it too if PID 1 was killed first. PID 1 itself stays outside, so it survives an OOM kill and
can always report and clean up. v1 groups nest under the caller's own group; v2 groups sit beside it,
since a v2 group that holds processes cannot give controllers to children. Everything below `plan` runs
inside PID 1: standard library only, no module globals but the constants it is sent with.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

CONTROLLERS = ("memory", "pids", "cpu")
GROUP_PREFIX = "evalflow-sandbox-"
CPU_PERIOD_US = 100_000
# A file each controller must offer in a fresh group, per version.
_REQUIRED = {2: ("memory.max", "pids.max", "cpu.max"), 1: ("memory.limit_in_bytes", "pids.max", "cpu.cfs_quota_us")}


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file system type, super options) of every mount, from /proc/self/mountinfo."""
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            tail = fields[fields.index("-") + 1 :]
            mounts.append(
                (fields[4].replace("\\040", " "), tail[0], set(tail[2].split(",")) if len(tail) > 2 else set())
            )
    return mounts


def _own_groups() -> dict[str, str]:
    """This process' group path per v1 controller, and under "" its v2 path."""
    groups = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                groups[controller] = path
    return groups


def _probe(version: int, parents: dict[str, str]) -> None:
    """Create and remove a group under each parent, checking that the controllers' files are there."""
    name = f"{GROUP_PREFIX}probe-{os.getpid()}"
    dirs = [os.path.join(parent, name) for parent in parents.values()]
    try:
        for path in dirs:
            os.mkdir(path)
        present = {entry for path in dirs for entry in os.listdir(path)}
        missing = [f for f in _REQUIRED[version] if f not in present]
        if missing:
            raise OSError(f"a new group lacks {', '.join(missing)}")
    finally:
        cg_remove(dirs)


def _plan_v2(mounts: list[tuple[str, str, set[str]]], groups: dict[str, str]) -> dict[str, Any]:
    root = next((point for point, fstype, _ in mounts if fstype == "cgroup2"), None)
    if root is None or "" not in groups:
        raise OSError("no cgroup2 mount")
    own = os.path.join(root, groups[""].lstrip("/"))
    base = own if groups[""] == "/" else os.path.dirname(own)
    with open(os.path.join(base, "cgroup.controllers")) as f:
        offered = set(f.read().split())
    if not set(CONTROLLERS) <= offered:
        raise OSError(f"cgroup2 at {base} offers {sorted(offered) or 'no controllers'}, not {list(CONTROLLERS)}")
    with open(os.path.join(base, "cgroup.subtree_control")) as f:
        enabled = set(f.read().split())
    if not set(CONTROLLERS) <= enabled:
        with open(os.path.join(base, "cgroup.subtree_control"), "w") as f:
            f.write(" ".join(f"+{c}" for c in CONTROLLERS))
    parents = {"": base}
    _probe(2, parents)
    return {"version": 2, "parents": parents}


def _plan_v1(mounts: list[tuple[str, str, set[str]]], groups: dict[str, str]) -> dict[str, Any]:
    parents = {}
    for controller in CONTROLLERS:
        point = next((p for p, fstype, opts in mounts if fstype == "cgroup" and controller in opts), None)
        if point is None or controller not in groups:
            raise OSError(f"no cgroup v1 hierarchy with the {controller} controller")
        parents[controller] = os.path.join(point, groups[controller].lstrip("/"))
    _probe(1, parents)
    return {"version": 1, "parents": parents}


def plan() -> tuple[dict[str, Any] | None, str | None]:
    """(the hierarchy to use, None), or (None, why neither cgroup v2 nor v1 can cap a run here)."""
    try:
        mounts, groups = _mounts(), _own_groups()
    except OSError as exc:
        return None, f"cannot read this process' cgroups: {exc}"
    reasons = []
    for version, make in ((2, _plan_v2), (1, _plan_v1)):
        try:
            return make(mounts, groups), None
        except (OSError, ValueError) as exc:
            reasons.append(f"v{version}: {exc}")
    return None, "; ".join(reasons)


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def cg_create(plan: dict[str, Any], name: str, memory_bytes: int, pids: int, cpus: float) -> list[str]:
    """Create the run's group(s) with their caps; returns the directories (one per v1 controller)."""
    dirs: list[str] = []
    try:
        for parent in plan["parents"].values():
            dirs.append(os.path.join(parent, name))
            os.mkdir(dirs[-1])
        quota = max(1000, int(cpus * CPU_PERIOD_US))
        if plan["version"] == 2:
            (path,) = dirs
            _write(f"{path}/memory.max", str(memory_bytes))
            if os.path.exists(f"{path}/memory.swap.max"):
                _write(f"{path}/memory.swap.max", "0")
            _write(f"{path}/pids.max", str(pids))
            _write(f"{path}/cpu.max", f"{quota} {CPU_PERIOD_US}")
        else:
            memory, pids_dir, cpu = dirs
            _write(f"{memory}/memory.limit_in_bytes", str(memory_bytes))
            if os.path.exists(f"{memory}/memory.memsw.limit_in_bytes"):  # no way around the cap through swap
                _write(f"{memory}/memory.memsw.limit_in_bytes", str(memory_bytes))
            _write(f"{pids_dir}/pids.max", str(pids))
            _write(f"{cpu}/cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(f"{cpu}/cpu.cfs_quota_us", str(quota))
    except BaseException:
        cg_remove(dirs)
        raise
    return dirs


def cg_join(dirs: list[str]) -> None:
    """Move the calling process into the run's group(s); its children are born there."""
    for path in dirs:
        _write(f"{path}/cgroup.procs", "0")


def _counter(path: str, key: str) -> int:
    with contextlib.suppress(OSError), open(path) as f:
        for line in f:
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


def cg_oom_kills(plan: dict[str, Any], dirs: list[str]) -> int:
    """How many processes the kernel killed in the group for want of memory."""
    if plan["version"] == 2:
        return _counter(f"{dirs[0]}/memory.events", "oom_kill")
    return _counter(f"{dirs[0]}/memory.oom_control", "oom_kill")


def cg_peak_bytes(plan: dict[str, Any], dirs: list[str]) -> int | None:
    """The group's peak memory use, where the kernel keeps it (v2 needs Linux 5.19)."""
    name = "memory.peak" if plan["version"] == 2 else "memory.max_usage_in_bytes"
    try:
        with open(f"{dirs[0]}/{name}") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cg_remove(dirs: list[str], wait_s: float = 2.0) -> list[str]:
    """Remove the groups (they must hold no process by now); returns those still there after `wait_s`."""
    deadline = time.monotonic() + wait_s
    left = [path for path in dirs if os.path.isdir(path)]
    while left:
        for path in list(left):
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                continue  # EBUSY while the last killed processes finish exiting
            left.remove(path)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return left
