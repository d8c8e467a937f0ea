"""Creating the vLLM runtime from nothing: uv (what evalflow uses) against pip (its fallback), one after the
other in one run, each into a scratch folder with an empty download cache, as on a fresh machine.

    uv run python -m bench.runtime_install [--installers uv,pip] [--flavor cpu]

Each row is `ensure_runtime` end to end: the venv, the packages (given pip's own configuration: indexes,
wheel folders, constraints), the CPU build's clean-up, and the import check (vLLM's server entry point and
the architecture lists, which compiles the bytecode of what they import). The ratio is each installer's
total over uv's. The network's speed is part of both rows; the two run back to back to see the same one.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import tempfile
import time
from pathlib import Path
from unittest import mock

from tasks.runtime import venv


def create(installer: str, flavor: str, work: Path) -> dict[str, float]:
    root, cache = work / installer / "runtimes", work / installer / "cache"
    env = {"UV_CACHE_DIR": str(cache / "uv"), "PIP_CACHE_DIR": str(cache / "pip")}
    started = time.monotonic()
    found = venv.find_uv if installer == "uv" else lambda: None
    with mock.patch.dict(os.environ, env), mock.patch.object(venv, "find_uv", found):
        rt = venv.ensure_runtime(flavor, root)
    total = time.monotonic() - started
    size = subprocess.run(["du", "-sm", str(rt.path)], capture_output=True, text=True).stdout.split()[0]
    return {"total": total, "mb": float(size)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--installers", default="uv,pip")
    parser.add_argument("--flavor", default="cpu")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    rows = {}
    with tempfile.TemporaryDirectory(prefix="evalflow-bench-runtime-") as tmp:
        for installer in args.installers.split(","):
            rows[installer] = create(installer, args.flavor, Path(tmp))
    base = rows.get("uv") or next(iter(rows.values()))
    print(f"\n{'installer':<10} {'total s':>8} {'runtime MB':>11} {'x uv':>6}")
    for installer, row in rows.items():
        print(f"{installer:<10} {row['total']:8.1f} {row['mb']:11.0f} {row['total'] / base['total']:6.2f}")


if __name__ == "__main__":
    main()
