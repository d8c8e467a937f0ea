"""A DCP checkpoint converted to a sharded HF folder, served by the real vLLM CPU server: greedy
completions equal those of the original folder on the shared server."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from core.config import ModelConfig, ServerConfig
from tasks.checkpoints import jobs
from tasks.checkpoints.light_check import safetensors_header
from tasks.checkpoints.prepare import PreparedModel, prepare_model_impl
from tasks.runtime.venv import Runtime
from tasks.serving.server import Endpoint, VLLMServer
from tests.checkpoints.conftest import build_dcp
from tests.conftest import FAST_START

pytestmark = pytest.mark.e2e

PROMPTS = [
    "What is 17 + 25? Answer with the number.",
    "Name three colours of the rainbow.",
    "Write one sentence about the sea.",
]


def greedy(base_url: str, model: str, prompt: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": 32}
    reply = httpx.post(f"{base_url}/chat/completions", json=body, timeout=120)
    reply.raise_for_status()
    return reply.json()["choices"][0]["message"]["content"]


def tensor_bytes(folder: Path) -> dict[str, bytes]:
    """Every tensor's raw bytes, read through the safetensors headers (no torch here)."""
    out = {}
    for file in sorted(folder.glob("*.safetensors")):
        header = safetensors_header(file)
        with file.open("rb") as fh:
            start = 8 + int.from_bytes(fh.read(8), "little")
            for name, meta in header.items():
                begin, end = meta["data_offsets"]
                fh.seek(start + begin)
                out[name] = fh.read(end - begin)
    return out


@pytest.fixture(scope="module")
def dcp_full(smollm2: PreparedModel, runtime: Runtime, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole default model (not the fast lane's two-layer cut) as a NeMo RL DCP checkpoint."""
    step = tmp_path_factory.mktemp("dcp-full") / "run-a" / "step_1"
    build_dcp(runtime, smollm2.path, step, "nemo-rl", files=2)
    return step


def test_converted_dcp_serves_like_the_original(
    smollm2: PreparedModel,
    endpoint: Endpoint,
    dcp_full: Path,
    runtime: Runtime,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(jobs, "MAX_SHARD_BYTES", 100_000_000)  # several shards + index: vLLM's harder case
    model = prepare_model_impl(
        ModelConfig(source=str(dcp_full), cache_dir=str(tmp_path / "cache"), served_name="dcp-step-1")
    )
    folder = Path(model.path)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 3 and not (folder / "model.safetensors").exists()
    assert tensor_bytes(folder) == tensor_bytes(Path(smollm2.path))  # bf16 round trip is exact

    server = VLLMServer(runtime, model, ServerConfig(extra_args=FAST_START), tmp_path / "vllm.log")
    converted = server.start()
    try:
        for prompt in PROMPTS:
            original = greedy(endpoint.base_url, endpoint.model, prompt)
            ours = greedy(converted.base_url, converted.model, prompt)
            print(f"{prompt!r} -> {ours!r}")
            assert ours == original and ours.strip()
    finally:
        server.stop()
