"""Checkpoint preparation pieces that need no torch: layouts, names, config, hashes, entries, locks, hub."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from core.config import ModelConfig
from tasks.checkpoints import entries, hub
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.hashing import HashMemo, folder_fingerprint
from tasks.checkpoints.layout import detect
from tasks.checkpoints.light_check import check_hf_folder
from tasks.checkpoints.prepare import _cache_key, plan_model, prepare_model_impl
from tasks.checkpoints.sources import identifier

REPO = Path(__file__).resolve().parents[2]


# --- layouts and names --------------------------------------------------------------------------


def test_detects_both_nemo_rl_layouts_and_what_to_download() -> None:
    wrapped = {
        "config.yaml": 1, "policy/weights/.metadata": 2, "policy/weights/__0_0.distcp": 3,
        "policy/weights/__1_0.distcp": 3, "policy/tokenizer/tokenizer.json": 4,
        "policy/tokenizer/chat_template.jinja": 1, "policy/optimizer/optim/__0_0.distcp": 99, "train_dataloader.pt": 5,
    }  # fmt: skip
    layout = detect(wrapped, "step_1")
    assert (layout.kind, layout.weights_dir, layout.config_yaml, layout.tokenizer_dir) == (
        "dcp", "policy/weights", "config.yaml", "policy/tokenizer",
    )  # fmt: skip
    assert "policy/optimizer/optim/__0_0.distcp" not in layout.needed  # optimizer state is never downloaded
    assert "train_dataloader.pt" not in layout.needed
    assert set(layout.needed) >= {"policy/weights/.metadata", "policy/weights/__1_0.distcp", "config.yaml"}

    flat = {"config.yaml": 1, "policy/weights/model/.metadata": 2, "policy/weights/model/__0_0.distcp": 3}
    assert detect(flat, "step_2").weights_dir == "policy/weights/model"
    assert detect(flat, "step_2").dcp_layout.startswith("flat")
    assert detect({".metadata": 1, "__0_0.distcp": 2}, "weights").weights_dir == ""  # pointed at the weights


def test_detect_explains_what_is_wrong() -> None:
    with pytest.raises(CheckpointError, match=r"no \.metadata: the checkpoint is incomplete"):
        detect({"policy/weights/__0_0.distcp": 1}, "step_3")
    with pytest.raises(CheckpointError, match=r"several checkpoints.*step_1, step_2"):
        detect({"step_1/policy/weights/.metadata": 1, "step_2/policy/weights/.metadata": 1}, "run")
    with pytest.raises(CheckpointError, match=r"config\.json but no weights"):
        detect({"config.json": 1}, "x")
    with pytest.raises(CheckpointError, match="is not a checkpoint"):
        detect({"notes.txt": 1}, "x")
    assert detect({"config.json": 1, "model.safetensors": 2}, "hf").kind == "hf"


@pytest.mark.parametrize(
    ("location", "name"),
    [
        ("/ckpt/grpo-run/step_100", "grpo-run-step_100"),
        ("/ckpt/grpo-run/step_100/policy/weights", "grpo-run-step_100"),
        ("s3://bucket/exp/step_7/policy/weights/model", "exp-step_7"),
        ("/models/My Model.gguf", "my-model"),
        ("/x/smol/policy/weights/model", "smol"),
    ],
)
def test_readable_identifiers(location: str, name: str) -> None:
    assert identifier(location) == name


def test_model_config_fields() -> None:
    with pytest.raises(ValidationError, match="exclude each other"):
        ModelConfig(force=True, skip=True)
    with pytest.raises(ValidationError, match="must be a local folder"):
        ModelConfig(output_dir="s3://bucket/out")
    with pytest.raises(ValidationError, match="Input should be"):
        ModelConfig(kind="onnx")
    cfg = ModelConfig.model_validate(
        {"source": "s3://b/run/step_1", "config_path": "s3://b/cfg", "storage_options": {"endpoint_url": "http://x"}}
    )
    assert cfg.kind == "auto" and cfg.dtype == "bfloat16" and not cfg.force and not cfg.skip


# --- hashes and fingerprints ----------------------------------------------------------------------


def test_hash_memo_survives_processes_and_notices_changes(tmp_path: Path) -> None:
    file = tmp_path / "shard.bin"
    file.write_bytes(b"a" * 1000)
    memo = HashMemo(tmp_path / "cache")
    first = memo.sha256(file)
    memo.flush()
    data = json.loads((tmp_path / "cache" / ".sha256-memo.json").read_text())
    assert data["files"][str(file)][3] == first

    # a new process (a new memo object) trusts the stamp: prove it by faking the stored digest
    data["files"][str(file)][3] = "remembered"
    (tmp_path / "cache" / ".sha256-memo.json").write_text(json.dumps(data))
    assert HashMemo(tmp_path / "cache").sha256(file) == "remembered"

    time.sleep(0.01)
    file.write_bytes(b"b" * 1000)  # same size, new mtime: hashed again
    assert HashMemo(tmp_path / "cache").sha256(file) not in ("remembered", first)
    replacement = tmp_path / "new.bin"
    replacement.write_bytes(b"a" * 1000)
    os.replace(replacement, file)  # new inode
    assert HashMemo(tmp_path / "cache").sha256(file) == first


def test_fingerprint_is_content_not_path(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        (folder / "evalflow-model.json").write_text(json.dumps({"created": str(folder)}))  # marker: ignored
    assert folder_fingerprint(a) == folder_fingerprint(b)
    (b / "config.json").write_text('{"x": 1}')
    assert folder_fingerprint(a) != folder_fingerprint(b)


# --- the light check (no torch) -------------------------------------------------------------------


def write_safetensors(path: Path, tensors: dict[str, int], truncate: int = 0) -> None:
    header, offset = {}, 0
    for name, nbytes in tensors.items():
        header[name] = {"dtype": "BF16", "shape": [nbytes // 2], "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * (offset - truncate))


def hf_folder(folder: Path) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_light_check_catches_the_index_pitfall_and_truncation(tmp_path: Path) -> None:
    good = hf_folder(tmp_path / "good")
    write_safetensors(good / "model.safetensors", {"a": 8, "b": 4})
    assert check_hf_folder(good).tensors == 2

    pitfall = hf_folder(tmp_path / "pitfall")
    write_safetensors(pitfall / "model.safetensors", {"a": 8})
    index = {"metadata": {"total_size": 8}, "weight_map": {"a": "model-00001-of-00001.safetensors"}}
    (pitfall / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="not written together"):
        check_hf_folder(pitfall)

    short = hf_folder(tmp_path / "short")
    write_safetensors(short / "model.safetensors", {"a": 8, "b": 4}, truncate=3)
    with pytest.raises(CheckpointError, match="truncated"):
        check_hf_folder(short)

    shards = hf_folder(tmp_path / "shards")
    write_safetensors(shards / "model-00001-of-00002.safetensors", {"a": 8})
    write_safetensors(shards / "model-00002-of-00002.safetensors", {"b": 8})
    with pytest.raises(CheckpointError, match=r"no model\.safetensors\.index\.json"):
        check_hf_folder(shards)


# --- entries and locks ----------------------------------------------------------------------------


class Made(BaseModel):
    ok: bool


M_JSON = entries.MarkerFile("m.json", Made.model_validate_json)


def test_a_failed_build_leaves_nothing_and_a_hit_needs_no_lock(tmp_path: Path) -> None:
    target = tmp_path / "m_0123"

    def broken(tmp: Path) -> Made:
        (tmp / "model.safetensors").write_bytes(b"half")
        raise CheckpointError("converter failed")

    with pytest.raises(CheckpointError):
        entries.ensure(
            target, tmp_path / ".0123.lock", M_JSON, broken, "test", lambda: entries.find(tmp_path, "0123", "m.json")
        )
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []

    def good(tmp: Path) -> Made:
        (tmp / "model.safetensors").write_bytes(b"whole")
        return Made(ok=True)

    built = entries.ensure(
        target, tmp_path / ".0123.lock", M_JSON, good, "test", lambda: entries.find(tmp_path, "0123", "m.json")
    )
    assert built.built and (target / "m.json").exists()
    again = entries.ensure(
        target, tmp_path / ".0123.lock", M_JSON, broken, "test", lambda: entries.find(tmp_path, "0123", "m.json")
    )
    assert not again.built and again.info == Made(ok=True)


def test_a_folder_without_marker_is_not_an_entry_and_stale_temps_are_removed(tmp_path: Path) -> None:
    (tmp_path / "m_0123").mkdir()  # e.g. copied by hand, or a foreign leftover
    (tmp_path / ".m_0123.tmp-999-abcdef").mkdir()  # a builder that died
    assert entries.find(tmp_path, "0123", "m.json") is None
    entries.build(tmp_path / "m_0123", M_JSON, lambda tmp: Made(ok=True))
    assert entries.find(tmp_path, "0123", "m.json") == tmp_path / "m_0123"
    assert entries.temp_folders(tmp_path / "m_0123") == []


HOLD_LOCK = """
import sys, time
from filelock import FileLock
lock = FileLock(sys.argv[1]); lock.acquire(); print("locked", flush=True); time.sleep(600)
"""


def test_the_lock_of_a_killed_process_does_not_block(tmp_path: Path) -> None:
    lock_path = tmp_path / ".key.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(lock_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        from filelock import FileLock, Timeout

        with pytest.raises(Timeout):
            FileLock(str(lock_path)).acquire(timeout=0.2)  # held by a live process: we wait
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        assert lock_path.exists()  # the lock file stays behind...
        started = time.monotonic()
        with entries.locked(lock_path, "test"):  # ...but the kernel released the flock with its owner
            assert time.monotonic() - started < 1.0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


# --- hub ids --------------------------------------------------------------------------------------


def test_hub_id_offline_fails_fast_and_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = ModelConfig(source="Qwen/Qwen2.5-0.5B-Instruct", cache_dir=str(tmp_path / "cache"))
    with pytest.raises(CheckpointError, match="HF_HUB_OFFLINE is set and the local HF cache has no snapshot"):
        prepare_model_impl(cfg)
    with pytest.raises(CheckpointError, match="HF_HUB_OFFLINE"):
        plan_model(cfg)

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: like a machine without network
    started = time.monotonic()
    with pytest.raises(CheckpointError, match=r"cannot be reached.*looks offline"):
        prepare_model_impl(cfg)
    assert time.monotonic() - started < hub.TIMEOUT_S + 2

    snapshot = tmp_path / "hf" / "hub" / "models--Qwen--Qwen2.5-0.5B-Instruct" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("abc123")
    model = prepare_model_impl(cfg)  # in the local HF cache: vLLM can serve it offline
    assert (model.kind, model.path, model.fingerprint) == ("hub", cfg.source, "hub:Qwen/Qwen2.5-0.5B-Instruct@abc123")


def test_missing_local_paths_are_not_taken_for_hub_ids(tmp_path: Path) -> None:
    for source in (str(tmp_path / "nope"), "./nope/step_1", "~/nope.gguf"):
        with pytest.raises(CheckpointError, match="no such file or folder"):
            prepare_model_impl(ModelConfig(source=source, cache_dir=str(tmp_path)))


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"source": "Qwen/Qwen2.5-0.5B-Instruct", "output_dir": "{tmp}/out"}, "a hub id is passed to vLLM as is"),
        ({"source": "{tmp}/hf", "output_dir": "{tmp}/out"}, "an HF folder is served in place"),
        ({"source": "{tmp}/model.gguf", "skip": True}, r"is a gguf source: set model\.output_dir"),
        ({"source": "{tmp}/hf", "output_dir": "{tmp}/nope", "skip": True}, "is not a folder"),
    ],
)
def test_dry_run_and_real_run_refuse_alike(fields: dict[str, Any], words: str, tmp_path: Path) -> None:
    folder = hf_folder(tmp_path / "hf")
    write_safetensors(folder / "model.safetensors", {"a": 8})
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    values = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in fields.items()}
    cfg = ModelConfig.model_validate({**values, "cache_dir": str(tmp_path / "cache")})
    with pytest.raises(CheckpointError, match=words):
        plan_model(cfg)
    with pytest.raises(CheckpointError, match=words):
        prepare_model_impl(cfg)


def test_prefect_cache_key_is_off_when_forced_or_broken(tmp_path: Path) -> None:
    assert _cache_key(None, {"cfg": ModelConfig(force=True)}) is None  # type: ignore[arg-type]
    assert _cache_key(None, {"cfg": ModelConfig(source=str(tmp_path / "nope"))}) is None  # type: ignore[arg-type]
    folder = hf_folder(tmp_path / "hf")
    write_safetensors(folder / "model.safetensors", {"a": 8})
    key = _cache_key(None, {"cfg": ModelConfig(source=str(folder), cache_dir=str(tmp_path / "c"))})  # type: ignore[arg-type]
    assert key and key.startswith("prepare-model-")
    (folder / "tokenizer.json").write_text('{"changed": true}')
    assert _cache_key(None, {"cfg": ModelConfig(source=str(folder), cache_dir=str(tmp_path / "c"))}) != key  # type: ignore[arg-type]
