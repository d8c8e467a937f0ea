"""Run a converter script inside the vLLM runtime (the orchestrator has no torch) and read its result.

The script's progress lines are logged as they come, its one result line is returned, and a
user-facing failure becomes a CheckpointError with the script's message. The child is killed if
we are interrupted, and dies with us if we are killed (it sets PR_SET_PDEATHSIG itself).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import deque
from pathlib import Path
from typing import Any

from core.logs import get_logger
from tasks.checkpoints.errors import CheckpointError
from tasks.runtime.venv import Runtime

HERE = Path(__file__).parent
RESULT_PREFIX = "EVALFLOW-RESULT "  # keep in step with _runtime_io.py (which cannot import us)
ERROR_PREFIX = "EVALFLOW-ERROR "
PROGRESS_PREFIX = "[convert] "


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


def run_script(runtime: Runtime, script: str, args: list[str], what: str) -> dict[str, Any]:
    """Run `tasks/checkpoints/<script>` with the runtime's python; return its result dict."""
    logger = get_logger()
    cmd = [str(runtime.python), str(HERE / script), *args]
    tail: deque[str] = deque(maxlen=40)
    result: dict[str, Any] | None = None
    error: str | None = None
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=script_env(runtime),  # the caller's working directory: every path it passes is absolute already
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line.startswith(RESULT_PREFIX):
                result = json.loads(line[len(RESULT_PREFIX) :])
            elif line.startswith(ERROR_PREFIX):
                error = json.loads(line[len(ERROR_PREFIX) :])
            elif line.startswith(PROGRESS_PREFIX):
                logger.info("%s: %s", what, line[len(PROGRESS_PREFIX) :])
            else:
                tail.append(line)
        code = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if error is not None:
        raise CheckpointError(f"{what}: {error}")
    if code != 0 or result is None:
        raise CheckpointError(f"{what} failed (exit {code}); last output:\n" + "\n".join(tail))
    return result
