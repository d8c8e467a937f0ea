"""Run a converter script inside the vLLM runtime (the orchestrator has no torch) and read its result.

The script's progress lines are logged as they come, its one result line is returned (validated
against the model of `results.py` the caller names), and a user-facing failure becomes a
CheckpointError with the script's message. The child is killed if we are interrupted, and dies with
us if we are killed (it sets PR_SET_PDEATHSIG itself).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from core.logs import get_logger
from tasks.checkpoints.errors import CheckpointError
from tasks.runtime.scripts import SCRIPTS_DIR
from tasks.runtime.venv import Runtime

RESULT_PREFIX = "EVALFLOW-RESULT "  # keep in step with _runtime_io.py (which cannot import us)
ERROR_PREFIX = "EVALFLOW-ERROR "
PROGRESS_PREFIX = "[convert] "
PROGRESS_S = 10.0  # the cadence of every progress line (collection, server start, waiting)

R = TypeVar("R", bound=BaseModel)


def script_env(runtime: Runtime) -> dict[str, str]:
    env = runtime.env()
    env.update(
        OMP_NUM_THREADS="1",  # fastest on small CPU machines, and leaves the server its cores
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",  # converters read local files only: never a surprise download
        TRANSFORMERS_OFFLINE="1",
        EVALFLOW_PARENT_PID=str(os.getpid()),
    )
    return env


def _folder_bytes(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0
        except OSError:  # written or renamed as we look
            continue
    return total


@dataclass(frozen=True)
class Watch:
    """What a conversion's progress lines measure: the folder being written and about how big it gets."""

    out_dir: Path
    expected_bytes: int  # an estimate (tensor elements x the served dtype's size)


def _heartbeat(what: str, watch: Watch, stop: threading.Event) -> None:
    """Every PROGRESS_S: time so far, bytes written of those expected, the rate and the estimated end."""
    started = time.monotonic()
    while not stop.wait(PROGRESS_S):
        elapsed = time.monotonic() - started
        written = _folder_bytes(watch.out_dir)
        line = f"{what}: {elapsed:.0f} s, written {written / 1e6:,.0f} of about {watch.expected_bytes / 1e6:,.0f} MB"
        if written:  # the rate counts from the start: reading and dequantizing come first
            rate = written / elapsed
            left = max(watch.expected_bytes - written, 0)
            line += f" ({rate / 1e6:.1f} MB/s, about {left / rate:.0f} s left)"
        get_logger().info(line)


def run_script(
    runtime: Runtime, script: str, args: list[str], what: str, result: type[R], watch: Watch | None = None
) -> R:
    """Run `tasks/runtime/scripts/<script>` with the runtime's python; return its result line as `result` (the
    script's TypedDict of that name, validated). With `watch` a line every PROGRESS_S says how far it is
    (bytes written of those expected, estimated end)."""
    logger = get_logger()
    cmd = [str(runtime.python), str(SCRIPTS_DIR / script), *args]
    tail: deque[str] = deque(maxlen=40)
    printed: str | None = None
    error: str | None = None
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=script_env(runtime),  # the caller's working directory: every path it passes is absolute already
    )  # fmt: skip
    stop = threading.Event()
    if watch is not None:
        threading.Thread(target=_heartbeat, args=(what, watch, stop), daemon=True).start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line.startswith(RESULT_PREFIX):
                printed = line[len(RESULT_PREFIX) :]
            elif line.startswith(ERROR_PREFIX):
                error = json.loads(line[len(ERROR_PREFIX) :])
            elif line.startswith(PROGRESS_PREFIX):
                logger.info("%s: %s", what, line[len(PROGRESS_PREFIX) :])
            else:
                tail.append(line)
        code = proc.wait()
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if error is not None:
        raise CheckpointError(f"{what}: {error}")
    if code != 0 or printed is None:
        raise CheckpointError(f"{what} failed (exit {code}); last output:\n" + "\n".join(tail))
    try:
        return result.model_validate_json(printed)
    except ValidationError as exc:  # the script and results.py are out of step: a defect, said plainly
        raise CheckpointError(f"{what}: {script} printed a result that is not a {result.__name__}: {exc}") from None
