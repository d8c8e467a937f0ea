"""The demo's CPU server, eager or compiled: which reaches the report sooner, measured in one run.

    uv run python -m bench.demo_server_mode [--config configs/demo.yaml] [--modes eager,compiled-cold,compiled-warm]

Each mode runs `evalflow run --config CONFIG` as a user does, on a store of its own (so nothing is cached
and every rollout is generated), one run at a time:

- eager: the config's `--enforce-eager` server (no torch.compile; what the demo has used);
- compiled-cold: vLLM's default (torch.compile), its compile cache empty (VLLM_CACHE_ROOT: a new folder),
  as on a user's first `make demo`;
- compiled-warm: compiled again with the cache the cold run filled, as on a later run.

The table gives each mode's server start and collection (the run's own stage timings), the whole run's wall
time, and the generated tokens/s of its collection; the ratios are each mode's wall time over eager's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from core.config import REPO_ROOT

MODES = ("eager", "compiled-cold", "compiled-warm")


def run_mode(mode: str, config: Path, cache_root: Path, work: Path) -> dict[str, float]:
    store = work / mode / "store"
    args = ["run", "--config", str(config), f"store.url={store}"]
    if mode != "eager":
        args.append("server.extra_args=[]")
    env = {**os.environ, "VLLM_CACHE_ROOT": str(cache_root)}
    started = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).with_name("evalflow")), *args], env=env, cwd=work,
                          capture_output=True, text=True)  # fmt: skip
    wall = time.monotonic() - started
    if done.returncode:
        raise SystemExit(f"{mode}: `evalflow {' '.join(args)}` failed:\n{done.stderr[-3000:]}")
    metrics = json.loads(next(store.glob("runs/*/metrics.json")).read_text())
    timings = metrics["run_info"]["timings"]
    tokens = sum(bm["tokens"]["completion_total"] for bm in metrics["benchmarks"].values())
    rollouts = sum(bm["n_rollouts"] for bm in metrics["benchmarks"].values())
    return {
        "start_s": timings["start_server"],
        "collect_s": timings["collect"],
        "wall_s": wall,
        "rollouts": rollouts,
        "tokens_per_s": tokens / timings["collect"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=REPO_ROOT / "configs" / "demo.yaml")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        raise SystemExit(f"unknown modes {sorted(unknown)}; use {', '.join(MODES)}")
    work = Path(tempfile.mkdtemp(prefix="evalflow-bench-demo-"))
    cache_root = work / "vllm-cache"  # compiled-cold fills it, compiled-warm reads it
    rows = {}
    for mode in modes:
        print(f"{mode}: running {args.config} ...", flush=True)
        rows[mode] = run_mode(mode, args.config.resolve(), cache_root, work)
        print(f"{mode}: {json.dumps({k: round(v, 1) for k, v in rows[mode].items()})}", flush=True)
    base = rows.get("eager")
    print(
        f"\n{'mode':<15} {'start s':>8} {'collect s':>10} {'wall s':>8} {'rollouts':>9} {'tokens/s':>9} {'vs eager':>9}"
    )
    for mode, r in rows.items():
        ratio = f"{r['wall_s'] / base['wall_s']:.2f}" if base else "-"
        print(f"{mode:<15} {r['start_s']:>8.1f} {r['collect_s']:>10.1f} {r['wall_s']:>8.1f} {r['rollouts']:>9.0f} "
              f"{r['tokens_per_s']:>9.1f} {ratio:>9}")  # fmt: skip


if __name__ == "__main__":
    main()
