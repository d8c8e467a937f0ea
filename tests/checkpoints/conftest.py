"""Fixtures for checkpoint preparation: DCP checkpoints written from the SmolLM2 weights (fp32, as RL
runs save them) in both NeMo RL layouts, and an S3 server (moto) on loopback."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks.checkpoints.prepare import PreparedModel
from tasks.checkpoints.runner import run_script
from tasks.runtime.venv import Runtime, ensure_runtime

HUB_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what a real NeMo RL config.yaml would name


@pytest.fixture(scope="session")
def runtime() -> Runtime:
    return ensure_runtime("auto")


def build_dcp(
    runtime: Runtime, hf_dir: str, step: Path, layout: str, model_name: str | None = None, files: int = 1,
    noise_seed: int | None = None, crc: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """Write `hf_dir` as a DCP checkpoint at `step` (a step_N folder) with the runtime's torch."""
    args = [hf_dir, str(step), "--layout", layout, "--files", str(files)]
    if model_name:
        args += ["--model-name", model_name]
    if noise_seed is not None:
        args += ["--noise-seed", str(noise_seed)]
    if not crc:
        args.append("--no-crc")
    return run_script(runtime, "hf_to_dcp.py", args, f"writing a DCP checkpoint to {step}")


@pytest.fixture(scope="session")
def dcp_nemo(smollm2: PreparedModel, runtime: Runtime, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """run-a/step_1: NeMo RL layout (policy/weights/, keys under `model.`, two shard files);
    config.yaml names the original folder as policy.model_name."""
    step = tmp_path_factory.mktemp("dcp") / "run-a" / "step_1"
    build_dcp(runtime, smollm2.path, step, "nemo-rl", files=2)
    return step


@pytest.fixture(scope="session")
def dcp_flat(smollm2: PreparedModel, runtime: Runtime, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """run-b/step_1: flat layout (policy/weights/model/, HF names); config.yaml names a hub model,
    which cannot be fetched here: model.config_path must be given."""
    step = tmp_path_factory.mktemp("dcp") / "run-b" / "step_1"
    build_dcp(runtime, smollm2.path, step, "flat", model_name=HUB_NAME)
    return step


def copy_step(step: Path, dst: Path) -> Path:
    shutil.copytree(step, dst)
    return dst


def link_step(step: Path, dst: Path, own: tuple[str, ...] = ()) -> Path:
    """`step` at `dst` in hard links (instant, no disk); the relative paths in `own` are real copies, safe to change."""

    def place(src: str, target: str) -> None:
        if os.path.relpath(src, step) in own:
            shutil.copy2(src, target)
        else:
            os.link(src, target)

    shutil.copytree(step, dst, copy_function=place)
    return dst


def cache_entries(root: Path) -> list[str]:
    """Every folder under a cache root (temporary ones included), downloads too."""
    if not root.exists():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name != "downloads"]
    downloads = root / "downloads"
    if downloads.exists():
        found += [p for p in downloads.iterdir() if p.is_dir()]
    return sorted(str(p.relative_to(root)) for p in found)


@pytest.fixture(scope="session")
def s3() -> Iterator[dict[str, Any]]:
    """A moto S3 server on 127.0.0.1; yields the fsspec storage options that reach it."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield {"endpoint_url": f"http://127.0.0.1:{port}", "key": "testing", "secret": "testing"}
    finally:
        server.stop()
