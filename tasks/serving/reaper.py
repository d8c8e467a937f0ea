"""Run a command and take its whole process group down when our parent dies.

Started as `python tasks/serving/reaper.py PARENT_PID -- CMD ...` in a new session (so it leads the
process group that the server and its worker processes live in). Whatever ends the orchestrator
(SIGKILL, OOM, a crashed flow run), the server does not outlive it. Standard library only: it runs
under any interpreter.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

GRACE_S = 15.0


def _stop_group(child: subprocess.Popen[bytes], grace: float = GRACE_S) -> None:
    """SIGTERM the group (vLLM shuts its engine processes down), SIGKILL what is left after grace."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # our own killpg must not stop us early
    pgid = os.getpgid(0)
    os.killpg(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=grace)
    os.killpg(pgid, signal.SIGKILL)  # stragglers, and this process too


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: reaper.py PARENT_PID -- CMD ...", file=sys.stderr)
        return 2
    parent = int(argv[0])
    child = subprocess.Popen(argv[2:])

    def on_term(signum: int, _frame: object) -> None:
        _stop_group(child)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    while True:
        code = child.poll()
        if code is not None:
            return code
        if os.getppid() != parent:  # re-parented: the orchestrator is gone
            _stop_group(child)
            return 1
        time.sleep(0.5)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
