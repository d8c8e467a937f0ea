"""Server and store blocks: saved by name, applied as defaults, overridden by the run, secrets kept."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect.settings import PREFECT_API_URL

from blocks import RunStoreBlock, VLLMServerBlock
from blocks.defaults import TYPES, default_blocks, save_defaults
from core.config import EvalConfig, ServerConfig
from core.resolve import BlockNotFound, resolve


@pytest.fixture
def gpu_block(prefect_home: Path) -> str:
    settings = ServerConfig(runtime="gpu", tool_call_parser="hermes", max_model_len=32768, gpu_memory_utilization=0.85)
    VLLMServerBlock(settings=settings).save("test-gpu", overwrite=True)
    return "test-gpu"


def test_server_block_supplies_defaults_and_the_run_overrides(gpu_block: str) -> None:
    cfg = EvalConfig.model_validate({"server": {"block": gpu_block, "max_model_len": 4096}})
    resolved = resolve(cfg).config.server
    assert (resolved.runtime, resolved.tool_call_parser, resolved.gpu_memory_utilization) == ("gpu", "hermes", 0.85)
    assert resolved.max_model_len == 4096  # set by the run: wins over the block's 32768
    assert resolved.block == gpu_block
    assert cfg.server.max_model_len == 4096 and cfg.server.runtime == "auto"  # the input is not modified


def test_missing_block_names_the_field(prefect_home: Path) -> None:
    cfg = EvalConfig.model_validate({"store": {"block": "no-such-store"}})
    with pytest.raises(BlockNotFound, match=r"store\.block: no saved evalflow-run-store block named 'no-such-store'"):
        resolve(cfg)


def test_store_credentials_stay_out_of_the_config(prefect_home: Path, tmp_path: Path) -> None:
    RunStoreBlock(
        url=str(tmp_path), storage_options={"client_kwargs": {"region_name": "x"}}, key="AKIA-blk", secret="s3cr3t-blk"
    ).save("test-store", overwrite=True)
    cfg = EvalConfig.model_validate({"store": {"block": "test-store"}})
    resolved = resolve(cfg)
    store = resolved.store
    assert store.url == str(tmp_path) == resolved.config.store.url
    assert store.options == {"client_kwargs": {"region_name": "x"}}  # what may be saved or shown
    assert store.fsspec_options() == {"client_kwargs": {"region_name": "x"}, "key": "AKIA-blk", "secret": "s3cr3t-blk"}
    shown = resolved.config.model_dump_json() + repr(store) + pickle.dumps(store).hex() + str(pickle.dumps(store))
    assert "s3cr3t-blk" not in shown and "AKIA-blk" not in shown
    loaded = RunStoreBlock.load("test-store")
    assert "s3cr3t-blk" not in repr(loaded) and loaded.credentials()["secret"] == "s3cr3t-blk"


def test_store_block_url_is_validated() -> None:
    with pytest.raises(ValueError, match="unknown protocol 's4'"):
        RunStoreBlock(url="s4://bucket/x")


def test_server_block_cannot_nest_blocks() -> None:
    with pytest.raises(ValueError, match="cannot name another block"):
        VLLMServerBlock(settings=ServerConfig(block="other"))


@pytest.fixture
def defaults_restored(prefect_home: Path) -> Iterator[None]:
    """The lane shares one Prefect server: the default blocks a test rewrites are put back afterwards, so no
    later test loads what it never saved (a store on S3 at a port nothing listens on, a server cut to 1024
    tokens)."""
    before = []
    for slug, names in default_blocks().items():
        for name in names:
            try:
                before.append((TYPES[slug], name, TYPES[slug].load(name)))
            except ValueError:  # none saved yet
                before.append((TYPES[slug], name, None))
    yield
    for kind, name, block in before:
        if block is None:
            kind.delete(name)
        else:
            block.save(name, overwrite=True)


def test_save_defaults_keeps_existing_blocks(defaults_restored: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVALFLOW_STORE_URL", raising=False)
    save_defaults(overwrite=True)
    qwen = VLLMServerBlock.load("qwen3-4b-h100").settings
    assert (qwen.tool_call_parser, qwen.reasoning_parser) == ("hermes", "qwen3")
    settings = VLLMServerBlock.load("cpu-smoke").settings
    assert (settings.extra_args[0], settings.chat_template) == (
        "--enforce-eager",
        "configs/chat_templates/smollm2_tools.jinja",
    )
    assert Path(RunStoreBlock.load("runs").url).is_absolute()
    edited = VLLMServerBlock.load("cpu-smoke")
    edited.settings.max_model_len = 1024
    edited.save("cpu-smoke", overwrite=True)
    assert "evalflow-vllm-server/cpu-smoke" not in save_defaults()
    assert VLLMServerBlock.load("cpu-smoke").settings.max_model_len == 1024


def test_store_block_from_the_environment(defaults_restored: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALFLOW_STORE_URL", "s3://bucket/evals")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA-env")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-env")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    save_defaults(overwrite=True)
    block = RunStoreBlock.load("runs")
    assert block.url == "s3://bucket/evals"
    assert block.storage_options == {"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}
    assert block.credentials() == {"key": "AKIA-env", "secret": "secret-env"}


def test_blocks_load_in_a_process_that_never_imports_them(gpu_block: str, tmp_path: Path) -> None:
    """The flow (core.resolve) loads blocks by type slug; Prefect imports blocks/ through the package's
    `prefect.collections` entry point, so no layer below blocks/ imports it."""
    code = (
        "import sys; from core.config import EvalConfig; from core.resolve import resolve;"
        f"s = resolve(EvalConfig.model_validate({{'server': {{'block': {gpu_block!r}}}}})).config.server;"
        "print(s.runtime, s.tool_call_parser)"
    )
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    env.pop("PYTHONPATH", None)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["gpu", "hermes"]
