"""evalflow's verdicts on a corpus, from this tree or another checkout (see evalflow_score.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SCORER = Path(__file__).with_name("evalflow_score.py")
REPO = Path(__file__).resolve().parents[2]


def _run(items: list[dict], tree: Path) -> tuple[list[dict], float]:
    payload = "".join(json.dumps(item) + "\n" for item in items)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, str(SCORER)], input=payload, capture_output=True, text=True, env=env, cwd=tree, check=False
    )
    if done.returncode:
        raise RuntimeError(f"evalflow scorer failed ({done.returncode}): {done.stderr[-2000:]}")
    seconds = float(done.stderr.rsplit("scoring seconds:", 1)[1].split()[0])
    return [json.loads(line) for line in done.stdout.splitlines()], seconds


def timed_evalflow(items: list[dict], tree: Path = REPO, processes: int = 0) -> tuple[list[dict], float]:
    """Per item the lm-eval-named metrics and reward evalflow's code in `tree` gives, and the seconds its
    `score` took in all (summed over `processes` scorers run side by side; 0: one per CPU, at most 4)."""
    n = processes or max(1, min(4, os.cpu_count() or 1))
    chunks = [items[i::n] for i in range(n)]
    with ThreadPoolExecutor(n) as pool:
        parts = list(pool.map(lambda chunk: _run(chunk, tree), chunks))
    verdicts: list[dict] = [{}] * len(items)
    for i, (got, _) in enumerate(parts):
        verdicts[i::n] = got
    return verdicts, sum(seconds for _, seconds in parts)
