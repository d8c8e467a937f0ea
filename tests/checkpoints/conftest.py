"""Fixtures for checkpoint preparation: a small model cut from SmolLM2 (its first two layers, its
tokenizer), DCP checkpoints written from it (fp32, as RL runs save them) in both NeMo RL layouts, and
an S3 server (moto) on loopback. The conversion code does the same work per tensor whatever the depth;
two layers instead of 30 make each checkpoint 150 MB instead of 540 MB, so the fast lane converts,
uploads and hashes a quarter of the bytes. The e2e lane serves converted DCPs of this model in several shards
(test_ckpt_swap_e2e.py) and of the whole model (tests/flows/test_training_run_e2e.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from core.config import ModelConfig
from core.ports import free_port
from tasks.checkpoints.prepare import PreparedModel, prepare_model_impl
from tasks.checkpoints.results import DcpExport
from tasks.checkpoints.runner import run_script
from tasks.runtime.venv import Runtime, ensure_runtime

HUB_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what a real NeMo RL config.yaml would name


@pytest.fixture(scope="session")
def runtime() -> Runtime:
    return ensure_runtime("auto")


def build_dcp(
    runtime: Runtime, hf_dir: str, step: Path, layout: str, model_name: str | None = None, files: int = 1,
    noise_seed: int | None = None, crc: bool = True, dtype: str = "float32",
) -> DcpExport:  # fmt: skip
    """Write `hf_dir` as a DCP checkpoint at `step` (a step_N folder) with the runtime's torch."""
    args = [hf_dir, str(step), "--layout", layout, "--files", str(files)]
    if model_name:
        args += ["--model-name", model_name]
    if noise_seed is not None:
        args += ["--noise-seed", str(noise_seed)]
    if not crc:
        args.append("--no-crc")
    if dtype != "float32":
        args += ["--dtype", dtype]
    return run_script(runtime, "hf_to_dcp.py", args, f"writing a DCP checkpoint to {step}", DcpExport)


SMALL_LAYERS = 2


CUT = """
import json, shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file
src, dst, layers = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
def kept(name):
    parts = name.split(".")
    return not (parts[:2] == ["model", "layers"] and int(parts[2]) >= layers)
tensors = {k: v for k, v in load_file(str(src / "model.safetensors")).items() if kept(k)}
save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
config = json.loads((src / "config.json").read_text())
(dst / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}, indent=2, sort_keys=True) + "\\n")
for file in src.iterdir():
    if file.name not in ("model.safetensors", "config.json") and not file.name.startswith("evalflow-"):
        shutil.copy2(file, dst / file.name)
"""


def cut_model(runtime: Runtime, src: Path, dst: Path, layers: int) -> Path:
    """`src` (an HF folder with one safetensors file) cut to its first `layers` decoder layers, written by
    safetensors as a converter writes (the runtime's torch): config.json says so, the tokenizer as it is."""
    dst.mkdir(parents=True)
    subprocess.run([str(runtime.python), "-c", CUT, str(src), str(dst), str(layers)], check=True, env=runtime.env())
    return dst


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """`build(folder)` run once per test session, whatever the number of xdist workers: the first worker
    to ask builds under the session's shared temporary root (a file lock held), the others wait and reuse
    it. The checkpoints here are read-only to the tests (they copy or hard-link what they change)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by every worker of this run
    folder, done = root / "shared" / name, root / "shared" / f"{name}.done"
    done.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(done) + ".lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed half-way in another worker
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def base_model(smollm2: PreparedModel, runtime: Runtime, tmp_path_factory: pytest.TempPathFactory) -> PreparedModel:
    """The small model as an HF folder (served in place): the original every DCP here is written from."""

    def build(root: Path) -> None:
        folder = cut_model(runtime, Path(smollm2.path), root / "smollm2-2l", SMALL_LAYERS)
        prepare_model_impl(ModelConfig(source=str(folder), cache_dir=str(root / "cache")))  # validated once

    root = built_once(tmp_path_factory, "base", build)
    return prepare_model_impl(ModelConfig(source=str(root / "smollm2-2l"), cache_dir=str(root / "cache")))


@pytest.fixture(scope="session")
def dcp_nemo(base_model: PreparedModel, runtime: Runtime, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """run-a/step_1: NeMo RL layout (policy/weights/, keys under `model.`, two shard files);
    config.yaml names the original folder as policy.model_name."""
    root = built_once(
        tmp_path_factory,
        "dcp-nemo",
        lambda d: build_dcp(runtime, base_model.path, d / "run-a" / "step_1", "nemo-rl", files=2),
    )
    return root / "run-a" / "step_1"


@pytest.fixture(scope="session")
def dcp_flat(base_model: PreparedModel, runtime: Runtime, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """run-b/step_1: flat layout (policy/weights/model/, HF names); config.yaml names a hub model,
    which cannot be fetched here: model.config_path must be given."""
    root = built_once(
        tmp_path_factory,
        "dcp-flat",
        lambda d: build_dcp(runtime, base_model.path, d / "run-b" / "step_1", "flat", model_name=HUB_NAME),
    )
    return root / "run-b" / "step_1"


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

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield {"endpoint_url": f"http://127.0.0.1:{port}", "key": "testing", "secret": "testing"}
    finally:
        server.stop()
