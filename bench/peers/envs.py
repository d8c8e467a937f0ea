"""Throwaway environments for the peer clients the collection bench runs beside evalflow: each peer
installed alone at the version the comparison names, built once per pin set under
`~/.cache/evalflow/bench-peers/` (file-locked) and reused; nothing of them reaches evalflow's own env."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Peer:
    name: str  # the bench's row label
    pins: tuple[str, ...]
    driver: Path  # the script run by the peer's Python (bench/peers/*_driver.py)


PEERS = {
    "lm-eval": Peer("lm-eval 0.4.13 local-chat-completions", ("lm-eval[api]==0.4.13",), HERE / "lm_eval_driver.py"),
    "inspect": Peer("Inspect AI 0.3.285 openai-api", ("inspect-ai==0.3.285", "openai"), HERE / "inspect_driver.py"),
}


def _uv() -> list[str]:
    found = shutil.which("uv")
    return [found] if found else [sys.executable, "-m", "uv"]


def throwaway_venv(group: str, name: str, pins: Sequence[str], *, no_deps: bool = False) -> Path:
    """The Python of a virtual environment holding `pins` (and, unless `no_deps`, what they depend on),
    built on first use under `~/.cache/evalflow/<group>/<name>-<key of the pins>` (file-locked, so
    processes share it) and reused; a build that failed half-way is started again."""
    key = hashlib.sha256(json.dumps(list(pins)).encode()).hexdigest()[:12]
    root = Path(os.environ.get("EVALFLOW_CACHE_DIR", Path.home() / ".cache" / "evalflow")) / group
    root.mkdir(parents=True, exist_ok=True)
    venv = root / f"{name}-{key}"
    python = venv / "bin" / "python"
    with FileLock(str(root / f"{venv.name}.lock")):
        if (venv / "evalflow-ready").exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        print(f"building {venv} ({', '.join(pins)}) ...", file=sys.stderr, flush=True)
        subprocess.run([*_uv(), "venv", "-q", "-p", sys.executable, str(venv)], check=True, env=env)
        install = [*_uv(), "pip", "install", "-q", "--python", str(python), *(["--no-deps"] if no_deps else [])]
        subprocess.run([*install, *pins], check=True, env=env)
        (venv / "evalflow-ready").write_text("\n".join(pins) + "\n")
    return python


def peer_python(peer: Peer) -> Path:
    """The peer environment's Python (a minute or two to build with a warm uv cache)."""
    return throwaway_venv("bench-peers", peer.driver.stem, peer.pins)


def run_peer(peer: Peer, requests: Path, base_url: str, model: str, concurrency: int, args: list[str]) -> dict:
    """One run of the peer's driver on the bench's requests: {"seconds", "completions", "cpu_s", ...}."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env.update(DO_NOT_TRACK="1", INSPECT_DISABLE_TELEMETRY="1", HF_HUB_OFFLINE="1")
    cmd = [str(peer_python(peer)), str(peer.driver), str(requests), base_url, model, str(concurrency), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=requests.parent)
    if done.returncode != 0:
        raise RuntimeError(f"{peer.name} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
