"""Checkpoints on S3 (moto on loopback): downloaded once, only what the conversion reads, keyed by
ETag; unreadable URLs fail clearly and leave no cache entry; credentials reach no file, log or message."""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import s3fs

from core.config import ModelConfig
from core.store import Store
from tasks.checkpoints import remote
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.hashing import MARKER
from tasks.checkpoints.prepare import PreparedModel, plan_model, prepare_model_impl
from tasks.checkpoints.sources import find_default_gguf
from tasks.runtime.venv import ensure_runtime
from tests.checkpoints.conftest import cache_entries

# distinctive values: "testing" (the fixture's) is also a word in the tokenizer's vocabulary
SECRETS = {"key": "AKIAEVALFLOWKEY4C1D9A", "secret": "evalflow-secret-8b72e0f5", "token": "evalflow-token-5ab2c7"}


def s3fs_of(options: dict[str, Any]) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(endpoint_url=options["endpoint_url"], key=options["key"], secret=options["secret"])


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("s3://no-such-bucket/run/step_1", "nothing there"),
        ("s3://ckpt-errors/missing/step_1", "nothing there"),
        ("s3://ckpt-errors/junk", "is not a checkpoint"),
        ("s3://ckpt-errors/run/step_1", "no .metadata"),
    ],
)
def test_unreadable_urls_fail_clearly(url: str, words: str, s3: dict[str, Any], tmp_path: Path) -> None:
    fs = s3fs_of(s3)
    if not fs.exists("ckpt-errors"):
        fs.mkdir("ckpt-errors")
        fs.pipe("ckpt-errors/junk/readme.txt", b"not a model")
        fs.pipe("ckpt-errors/run/step_1/policy/weights/__0_0.distcp", b"half a checkpoint")
    cache = tmp_path / "cache"
    cfg = ModelConfig(source=url, storage_options=s3, cache_dir=str(cache))
    with pytest.raises(CheckpointError, match=words):
        prepare_model_impl(cfg)
    with pytest.raises(CheckpointError, match=words):
        plan_model(cfg)
    assert cache_entries(cache) == []


def test_an_unreachable_endpoint_fails_in_seconds(tmp_path: Path) -> None:
    options = {"endpoint_url": "http://127.0.0.1:9", "key": "k", "secret": "s"}
    cfg = ModelConfig(source="s3://bucket/run/step_1", storage_options=options, cache_dir=str(tmp_path / "c"))
    started = time.monotonic()
    with pytest.raises(CheckpointError, match=r"cannot list s3://bucket/run/step_1 \(EndpointConnectionError"):
        prepare_model_impl(cfg)
    assert time.monotonic() - started < 30
    assert cache_entries(tmp_path / "c") == []


def test_download_key_follows_the_etag(s3: dict[str, Any]) -> None:
    fs = s3fs_of(s3)
    fs.mkdir("ckpt-etag")
    fs.pipe("ckpt-etag/m/model.gguf", b"a" * 100)
    url = "s3://ckpt-etag/m/model.gguf"
    first = remote.list_url(Store(url, s3), url)
    assert first.is_file and list(first.files) == ["model.gguf"]
    fs.pipe("ckpt-etag/m/model.gguf", b"b" * 100)  # same size, new content
    second = remote.list_url(Store(url, s3), url)
    assert remote.download_key(first, ["model.gguf"]) != remote.download_key(second, ["model.gguf"])


def test_dcp_on_s3_is_downloaded_once_and_converted_and_its_credentials_reach_no_file_log_or_message(
    dcp_flat: Path, base_model: PreparedModel, s3: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fs = s3fs_of(s3)
    fs.mkdir("ckpt")
    fs.put(str(dcp_flat) + "/", "ckpt/run-b/step_1/", recursive=True)
    fs.pipe("ckpt/run-b/step_1/policy/optimizer/optim/__0_0.distcp", b"\0" * 1_000_000)  # never downloaded
    config = tmp_path / "config"
    config.mkdir()
    for name in ("config.json", "generation_config.json"):
        shutil.copyfile(Path(base_model.path, name), config / name)
    fs.put(str(config) + "/", "ckpt/smollm2-config/", recursive=True)

    cache = tmp_path / "cache"
    cfg = ModelConfig(
        source="s3://ckpt/run-b/step_1",
        config_path="s3://ckpt/smollm2-config",
        storage_options={**s3, **SECRETS},  # moto takes any credentials: these must not be written anywhere
        cache_dir=str(cache),
    )
    caplog.set_level(logging.INFO)
    plan = plan_model(cfg)
    assert plan.download and (plan.kind, plan.cache, plan.download.cached) == ("dcp", "unknown", False)
    weights = sum(f.stat().st_size for f in (dcp_flat / "policy/weights").rglob("*") if f.is_file())
    step = sum(f.stat().st_size for f in dcp_flat.rglob("*") if f.is_file())  # weights, tokenizer, config.yaml
    assert weights > 100e6 and plan.action.startswith("download")
    assert weights <= plan.download.bytes <= step  # not the optimizer state (1 MB, only on S3)
    assert cache_entries(cache) == []  # the dry run downloaded nothing

    model = prepare_model_impl(cfg)
    assert (model.kind, model.served_name, model.cache_hit) == ("dcp", "run-b-step_1", False)
    assert model.fingerprint == base_model.fingerprint  # the same bytes as the local round trip
    assert "converting model.source s3://ckpt/run-b/step_1" in caplog.text  # the converter's logs are captured
    downloads = [p for p in (cache / "downloads").iterdir() if p.is_dir()]
    assert len(downloads) == 2  # the checkpoint and the config folder
    fetched = {p.relative_to(d).as_posix() for d in downloads for p in d.rglob("*") if p.is_file()}
    assert not any("optimizer" in f for f in fetched)
    assert "policy/weights/model/__0_0.distcp" in fetched and "config.json" in fetched
    marker = json.loads(
        next(d for d in downloads if d.name.startswith("run-b")).joinpath(".evalflow-download.json").read_text()
    )
    assert marker["url"] == "s3://ckpt/run-b/step_1"

    started = time.perf_counter()
    again = prepare_model_impl(cfg)
    seconds = time.perf_counter() - started
    print(f"S3 checkpoint, second request: {seconds * 1000:.0f} ms (listing only)")
    assert again.cache_hit and again.path == model.path and seconds < 2.0
    assert plan_model(cfg).cache == "hit"

    with pytest.raises(CheckpointError) as error:
        prepare_model_impl(cfg.model_copy(update={"source": "s3://ckpt/nothing/step_1"}))
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert {MARKER, remote.DOWNLOAD_MARKER} <= {p.name for p in files}
    for value in SECRETS.values():
        assert not [p for p in files if value.encode() in p.read_bytes()], value
        assert value not in caplog.text and value not in str(error.value)


def test_gguf_on_s3_reuses_the_conversion_of_the_same_bytes(
    smollm2: PreparedModel, s3: dict[str, Any], tmp_path: Path
) -> None:
    gguf = find_default_gguf(ensure_runtime("auto"))  # the bytes `smollm2` was converted from
    fs = s3fs_of(s3)
    fs.mkdir("ckpt-gguf")
    fs.put(str(gguf), "ckpt-gguf/smol/SmolLM2.gguf")
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copytree(smollm2.path, cache / Path(smollm2.path).name)  # the local conversion of these bytes
    cfg = ModelConfig(source="s3://ckpt-gguf/smol/SmolLM2.gguf", storage_options=s3, cache_dir=str(cache))
    assert (download := plan_model(cfg).download) and download.bytes == gguf.stat().st_size

    model = prepare_model_impl(cfg)  # downloaded, then found by content: no conversion
    assert (model.kind, model.served_name, model.cache_hit) == ("gguf", "smollm2", True)
    assert model.path == str(cache / Path(smollm2.path).name) and model.fingerprint == smollm2.fingerprint
    assert [p.name for p in (cache / "downloads").rglob("*.gguf")] == ["SmolLM2.gguf"]
    assert plan_model(cfg).cache == "hit"


def test_hf_folder_on_s3_is_downloaded_and_served_in_place(
    base_model: PreparedModel, s3: dict[str, Any], tmp_path: Path
) -> None:
    fs = s3fs_of(s3)
    fs.mkdir("ckpt-hf")
    fs.put(base_model.path + "/", "ckpt-hf/smollm2/", recursive=True)
    fs.pipe("ckpt-hf/smollm2/original/consolidated.pth", b"\0" * 1000)  # sub-folders are not served: not fetched
    cache = tmp_path / "cache"
    cfg = ModelConfig(source="s3://ckpt-hf/smollm2", storage_options=s3, cache_dir=str(cache))
    model = prepare_model_impl(cfg)
    assert (model.kind, model.served_name) == ("hf", "smollm2")
    assert model.fingerprint == base_model.fingerprint  # the download marker is a dot-file: not served, not hashed
    assert Path(model.path).parent == cache / "downloads" and not (Path(model.path) / "original").exists()
    again = prepare_model_impl(cfg)
    assert again.cache_hit and again.path == model.path
