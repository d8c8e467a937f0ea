"""Cache keys and markers are pinned: a conversion, a download and Prefect's task cache are found by the
keys earlier evalflow versions computed, and markers written by them load and are written again byte for
byte. The values were computed by the code before the records were typed (no torch needed here)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from core.config import ModelConfig
from tasks.checkpoints import entries, jobs, remote
from tasks.checkpoints.decide import decide
from tasks.checkpoints.hashing import MARKER, key_of
from tasks.checkpoints.prepare import _cache_key
from tasks.checkpoints.records import CONVERTED, ConversionMarker, FirstMarker


def tiny_gguf(path: Path) -> Path:
    """A GGUF header naming a llama and no tensors: enough for the plan."""

    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text)) + text.encode()

    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + string("general.architecture") + struct.pack("<I", 8)
    head += string("llama")
    path.write_bytes(head + b"\0" * (-len(head) % 32))
    return path


def tiny_dcp(root: Path) -> Path:
    base = root / "base"
    base.mkdir(parents=True)
    (base / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    (base / "tokenizer.json").write_text("{}")
    step = root / "run" / "step_7"
    (step / "policy" / "weights").mkdir(parents=True)
    (step / "policy" / "weights" / ".metadata").write_bytes(b"metadata")
    (step / "policy" / "weights" / "__0_0.distcp").write_bytes(b"shard zero")
    (step / "policy" / "tokenizer").mkdir()
    (step / "policy" / "tokenizer" / "tokenizer.json").write_text('{"v": 1}')
    (step / "config.yaml").write_text("policy:\n  model_name: ../../base\n")
    return step


@pytest.mark.parametrize(("dtype", "key"), [("bfloat16", "8f357c13d3a10fb7"), ("float16", "94db0da782ffa222")])
def test_gguf_keys_are_pinned(tmp_path: Path, dtype: str, key: str) -> None:
    cfg = ModelConfig(source=str(tiny_gguf(tmp_path / "tiny.gguf")), cache_dir=str(tmp_path / "c"), dtype=dtype)
    decision = decide(cfg)
    assert decision.job is not None and decision.job.key == key
    parts = {"id": key, "kind": "gguf", "target": decision.target, "name": decision.served_name}
    assert _cache_key(None, {"cfg": cfg}) == f"prepare-model-{key_of(parts)}"  # type: ignore[arg-type]


@pytest.mark.parametrize(("dtype", "key"), [("bfloat16", "a00333f78da98658"), ("float32", "9c1ae5cc0c4ae3a4")])
def test_dcp_keys_are_pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: str, key: str) -> None:
    monkeypatch.setattr(jobs, "run_script", lambda *args, **kwargs: None)  # the shards are no real DCP
    cfg = ModelConfig(source=str(tiny_dcp(tmp_path)), cache_dir=str(tmp_path / "c"), dtype=dtype)
    decision = decide(cfg)
    assert decision.job is not None and decision.job.key == key
    assert key_of(decision.job.inputs.weights) == "44acd8201c526bdd"  # type: ignore[union-attr]


def test_download_and_task_keys_are_pinned() -> None:
    files = {"a.distcp": remote.RemoteFile(3, '"etag-a"'), "x/b.json": remote.RemoteFile(5, "2024-01-01")}
    listing = remote.Listing("s3://bucket/run/step_1", False, files)
    assert remote.download_key(listing, ["a.distcp", "x/b.json"]) == "b262d1159a65bec6"
    parts = {"id": "361450be0bb59dce", "kind": "gguf", "target": "/cache/m_361450be0bb59dce", "name": "m"}
    assert key_of(parts) == "f7dfaa27604491f5"


SECONDS = {"convert": 14.822, "validate": 0.173}
GGUF_MARKER = {
    "architecture": "LlamaForCausalLM", "converted_by": {"host": "vm", "pid": 5822},
    "converter": {
        "architecture": "LlamaForCausalLM", "chat_template": True, "dtype": "bfloat16",
        "files": ["config.json", "model.safetensors", "tokenizer.json"], "parameters": 134515008, "pid": 5872,
        "safetensors_dtypes": ["BF16"], "seconds": SECONDS, "source_bytes": 98362432, "tensors": 272,
        "tied": ["lm_head.weight"], "weight_files": ["model.safetensors"],
    },
    "created": 1795632984.7913556, "dtype": "bfloat16", "files": ["config.json", "model.safetensors", "tokenizer.json"],
    "fingerprint": "4cacf3917a176364eaff3583dafceecde43ececc397c0ec27e9eeae020bb7971",
    "inputs": {"gguf": {"SmolLM2-135M-Instruct.Q4_1.gguf": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373"}},
    "key": "361450be0bb59dce", "kind": "gguf", "options": {"converter": "1", "dtype": "bfloat16"},
    "parameters": 134515008, "seconds": 18.662, "source": "smollm2-135m-instruct", "source_bytes": 98362432,
}  # fmt: skip
DCP_MARKER = {
    **GGUF_MARKER,
    "converter": {
        **GGUF_MARKER["converter"], "dropped_tied": ["lm_head.weight"], "ignored_non_tensors": 0,
        "key_prefix_stripped": True, "seconds": {"check": 1.94, "tensors": 0.899, "validate": 0.384},
        "source_dtypes": ["float32"], "tokenizer_files": ["tokenizer.json", "chat_template.jinja"],
    },
    "inputs": {"config": {"config.json": "6f"}, "tokenizer": {"tokenizer.json": "bf"}, "weights": {".metadata": "e3"}},
    "key": "9db335aabd5de1b3", "kind": "dcp", "source": "/runs/run-a/step_1",
    "options": {"converter": "dcp-2", "dtype": "bfloat16", "max_shard_bytes": 100000000},
}  # fmt: skip
FIRST_MARKER = {  # evalflow's first GGUF converter: no key, no inputs, no converter section
    "architecture": "LlamaForCausalLM", "parameters": 134515008, "dtype": "bfloat16", "files": ["config.json"],
    "fingerprint": "4cacf391", "source": "/models/smol.gguf", "options": {"converter": "1", "dtype": "bfloat16"},
    "created": 1795632984.5,
}  # fmt: skip


@pytest.mark.parametrize("written", [GGUF_MARKER, DCP_MARKER], ids=["gguf", "dcp"])
def test_markers_load_and_are_written_again_byte_for_byte(tmp_path: Path, written: dict[str, object]) -> None:
    text = json.dumps(written, indent=2, sort_keys=True)  # as the code before the typed records wrote it
    (tmp_path / MARKER).write_text(text)
    marker = entries.read_marker(tmp_path, CONVERTED)
    assert isinstance(marker, ConversionMarker) and marker.key == written["key"]
    entries.write_marker(tmp_path, MARKER, marker)
    assert (tmp_path / MARKER).read_text() == text


def test_a_first_marker_still_loads_and_a_foreign_one_does_not(tmp_path: Path) -> None:
    (tmp_path / MARKER).write_text(json.dumps(FIRST_MARKER, indent=2))
    first = entries.read_marker(tmp_path, CONVERTED)
    assert isinstance(first, FirstMarker) and (first.fingerprint, first.key) == ("4cacf391", None)
    (tmp_path / MARKER).write_text(json.dumps({**GGUF_MARKER, "surprise": 1}))
    with pytest.raises(ValueError, match="surprise"):
        entries.read_marker(tmp_path, CONVERTED)


def test_a_download_marker_is_written_again_byte_for_byte(tmp_path: Path) -> None:
    written = {
        "bytes": 98,
        "created": 1795632984.25,
        "files": {"m.gguf": [98, '"a123"']},
        "seconds": 0.5,
        "url": "s3://b/m.gguf",
    }
    text = json.dumps(written, indent=2, sort_keys=True)
    (tmp_path / remote.DOWNLOAD_MARKER).write_text(text)
    entries.write_marker(tmp_path, remote.DOWNLOAD_MARKER, entries.read_marker(tmp_path, remote.DOWNLOADED))
    assert (tmp_path / remote.DOWNLOAD_MARKER).read_text() == text
