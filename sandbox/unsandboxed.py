"""The explicit escape hatch: runs without the sandbox (no namespaces, uids, private root or cgroup).

Only for trusted code or throwaway machines. Programs get rlimits, their own session, a scrubbed
environment and a temporary working folder (removed afterwards, but not if this process is SIGKILLed).
A judged run still keeps its tests in a separate judge process, but both run as this user, so the program
can read or trace the judge: its verdicts are NOT robust against hostile code here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import tempfile
import time
from typing import Any

from sandbox.launch import Raw, drain, drain_lines, killpg
from sandbox.pid1 import BOOT, EXIT_GRACE_S, PROGRAM_NAME

_Process = asyncio.subprocess.Process


def _preexec(limits: dict[str, int]) -> Any:
    def apply() -> None:
        for name, value in limits.items():
            # Without a uid of its own, RLIMIT_NPROC would count all of this user's processes.
            if name != "RLIMIT_NPROC":
                resource.setrlimit(getattr(resource, name), (value, value))

    return apply


async def _start(argv: list[str], cwd: str, env: dict[str, str], limits: dict[str, int], **kw: Any) -> _Process:
    return await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        env=env,
        start_new_session=True,
        preexec_fn=_preexec(limits),
        **kw,
    )


def _fate(role: str, rc: int) -> str:
    return f"{role} exit {rc}" if rc >= 0 else f"{role} signal {-rc}"


async def run_unsandboxed(
    python: str, run: dict[str, Any], timeout_s: float, limits: dict[str, int], env: dict[str, str]
) -> Raw:
    """Run `run` (the same shape PID 1 reads) as plain children; report in PID 1's status-line format."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="evalflow-unsandboxed-") as scratch:
        os.mkdir(os.path.join(scratch, "tmp"))
        env = {**env, "HOME": scratch, "TMPDIR": os.path.join(scratch, "tmp")}
        with open(os.path.join(scratch, PROGRAM_NAME), "wb") as f:
            f.write(run["program"].encode("utf-8", errors="replace"))  # model output may hold lone surrogates
        pipe = asyncio.subprocess.PIPE
        if run["judge"] is None:
            program = await _start([python, "-I", "-S", PROGRAM_NAME], scratch, env, limits, stdout=pipe, stderr=pipe)
            return await _collect(program, None, None, timeout_s, start)
        harness = os.path.join(scratch, "harness")
        for relpath, text in run["files"].items():
            os.makedirs(os.path.dirname(os.path.join(harness, relpath)), exist_ok=True)
            with open(os.path.join(harness, relpath), "w") as f:
                f.write(text)
        spec = os.path.join(scratch, "judge.json")
        with open(spec, "w") as f:
            json.dump(run["judge"], f)
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        status_r, status_w = os.pipe()
        fds = f"{request_w},{reply_r},{status_w}"
        try:
            boot = [python, "-I", "-S", "-c"]
            judge = await _start(
                [*boot, BOOT.format(dir=harness, module="harness_judge"), spec, fds],
                "/",
                env,
                limits,
                pass_fds=(request_w, reply_r, status_w),
                stderr=pipe,
            )
            runner = [*boot, BOOT.format(dir=harness, module="harness_runner"), f"{request_r},{reply_w}"]
            program = await _start(
                runner, scratch, env, limits, pass_fds=(request_r, reply_w), stdout=pipe, stderr=pipe
            )
        finally:
            for fd in (request_r, request_w, reply_r, reply_w, status_w):
                os.close(fd)
        return await _collect(program, judge, status_r, timeout_s, start)


async def _collect(
    program: _Process, judge: _Process | None, status_r: int | None, timeout_s: float, start: float
) -> Raw:
    roles = {"program": program} if judge is None else {"judge": judge, "program": program}
    main = judge or program
    tasks = [asyncio.ensure_future(drain(p.stderr)) for p in roles.values()]
    tasks.append(asyncio.ensure_future(drain(program.stdout)))
    transport: asyncio.BaseTransport | None = None
    status: asyncio.Future[list[str]] | None = None
    if status_r is not None:
        reader = asyncio.StreamReader()
        transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(status_r, "rb", buffering=0)
        )
        status = asyncio.ensure_future(drain_lines(reader))
    reason = "finished"
    try:
        await asyncio.wait_for(main.wait(), timeout_s)
        if program.returncode is None:  # the judge is done; the program may still flush its output
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(program.wait(), EXIT_GRACE_S)
    except TimeoutError:
        reason = "timeout"
    finally:
        fates = [_fate(role, p.returncode) for role, p in roles.items() if p.returncode is not None]
        for proc in roles.values():
            killpg(proc.pid)  # also takes down children left in its group
            await proc.wait()
    outputs = await asyncio.gather(*tasks)
    status_lines = await status if status is not None else []
    if transport is not None:
        transport.close()
    lines = [*status_lines, *fates, f"end {reason}"]
    stderr = "".join(outputs[: len(roles)])
    return Raw(lines, None, outputs[len(roles)], stderr, time.monotonic() - start, False)
