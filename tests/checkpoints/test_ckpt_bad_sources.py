"""Bad model sources fail in one line naming model.source and the file: corrupt DCP shards (same size),
a relative policy.model_name, path-like sources that are not there, and files that are not GGUF."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import s3fs

from core.config import ModelConfig
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.prepare import PreparedModel, plan_model, prepare_model_impl
from tasks.checkpoints.records import DcpConversionPlan
from tasks.runtime.venv import Runtime
from tests.checkpoints.conftest import build_dcp, cache_entries, link_step

WEIGHTS = "policy/weights"


def flip(path: Path, offset: int, count: int = 32) -> None:
    """Invert `count` bytes at `offset` (from the end when negative): the file keeps its size."""
    size = path.stat().st_size
    with path.open("r+b") as fh:
        fh.seek(offset % size)
        data = fh.read(count)
        fh.seek(offset % size)
        fh.write(bytes(b ^ 0xFF for b in data))
    assert path.stat().st_size == size


def failure(cfg: ModelConfig) -> str:
    """The one-line message preparing `cfg` fails with."""
    with pytest.raises(CheckpointError) as info:
        prepare_model_impl(cfg)
    message = str(info.value)
    assert "\n" not in message and "weights_only" not in message and "Traceback" not in message
    # a corrupt .metadata is found by the plan's check (no tensor loaded), a corrupt record by the conversion
    assert re.match(rf"(converting|checking) model\.source {re.escape(cfg.source)}: ", message), message
    return message


# --- corrupt DCP checkpoints, same size: torch's CheckpointException is a BaseException -------------

CRC = r"is corrupt: the record of model\.\S+ \(bytes \d+-\d+\) fails its check \(Bad CRC-32 for file 'archive/"


@pytest.mark.parametrize(
    ("shard", "offset", "words"),
    [  # before: a 40-line torch traceback; a silent conversion of damaged weights; "does not load"
        pytest.param("__0_1.distcp", 0x40, CRC + r"data\.pkl'\)", id="a-record-pickle"),
        pytest.param("__0_1.distcp", 200_000_000, CRC + r"data/0'\)", id="tensor-bytes"),
        pytest.param(".metadata", 0, r"is corrupt or unreadable \(UnpicklingError: invalid load key", id="metadata"),
    ],
)
def test_a_corrupt_shard_is_named_and_nothing_is_cached(
    dcp_nemo: Path, shard: str, offset: int, words: str, tmp_path: Path
) -> None:
    step = link_step(dcp_nemo, tmp_path / "run" / "step_1", own=(f"{WEIGHTS}/{shard}",))
    flip(step / WEIGHTS / shard, offset)
    cache = tmp_path / "cache"
    message = failure(ModelConfig(source=str(step), cache_dir=str(cache)))
    assert re.search(re.escape(str(step / WEIGHTS / shard)) + " " + words, message), message
    assert message.endswith("was damaged after it was saved (a bad copy or disk): copy it again, or use another step")
    assert cache_entries(cache) == []


def test_a_corrupt_shard_saved_without_crcs_names_the_checkpoint(
    base_model: PreparedModel, runtime: Runtime, tmp_path: Path
) -> None:
    """Without CRCs (a writer may turn them off) only torch notices, inside a CheckpointException."""
    step = tmp_path / "run" / "step_1"
    build_dcp(runtime, base_model.path, step, "nemo-rl", crc=False)
    flip(step / WEIGHTS / "__0_0.distcp", 0x40)
    cache = tmp_path / "cache"
    message = failure(ModelConfig(source=str(step), cache_dir=str(cache)))
    assert f"{step / WEIGHTS} is corrupt or unreadable: torch cannot read its tensors (UnpicklingError: " in message
    assert cache_entries(cache) == []


# --- policy.model_name relative to the checkpoint -----------------------------------------------------


def test_a_relative_model_name_resolves_against_the_checkpoint_not_the_current_folder(
    dcp_nemo: Path, base_model: PreparedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpts = tmp_path / "ckpts"
    step = link_step(dcp_nemo, ckpts / "run" / "step_1", own=("config.yaml",))  # rewritten below
    (ckpts / "base").symlink_to(base_model.path)  # the model the run started from, next to the run
    for name in (step / "policy/tokenizer").iterdir():  # so the tokenizer too comes from policy.tokenizer.name
        name.unlink()
    (step / "policy/tokenizer").rmdir()
    (step / "config.yaml").write_text("policy:\n  model_name: ../../base\n  tokenizer:\n    name: ../../base\n")
    elsewhere = tmp_path / "elsewhere" / "deeper"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)  # ../../base from here is tmp_path/base: not there

    plan = plan_model(ModelConfig(source=str(step), cache_dir=str(tmp_path / "cache")))
    base = str(Path(base_model.path).resolve())
    assert isinstance(plan.convert, DcpConversionPlan)
    assert (plan.convert.config_dir, plan.convert.tokenizer_dir) == (base, base)
    assert plan.convert.policy_model_name == "../../base"

    (step / "config.yaml").write_text("policy:\n  model_name: ../missing\n")
    with pytest.raises(CheckpointError) as info:
        plan_model(ModelConfig(source=str(step), cache_dir=str(tmp_path / "cache")))
    assert f"names policy.model_name='../missing', but {(step.parent / 'missing').resolve()} is no folder" in str(
        info.value
    )
    assert str(info.value).startswith(f"model.source {str(step)!r}: the architecture config is unknown")


# --- sources that look like paths are never hub ids -------------------------------------------------


@pytest.mark.parametrize(
    ("source", "where"),
    [
        ("x/y", "x exists, x/y does not"),
        ("x/y/z", "x exists, x/y does not"),
        ("./nope", "nope does not exist"),
        ("notes/m", "notes is a file, not a folder"),
        ("model.safetensors", "model.safetensors does not exist"),
        ("pytorch_model.bin", "pytorch_model.bin does not exist"),
        ("step.pt", "step.pt does not exist"),
        ("__0_0.distcp", "__0_0.distcp does not exist"),
        ("run/config.yaml", "run does not exist"),
    ],
)
def test_a_source_that_looks_like_a_path_is_never_a_hub_id(
    source: str, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a hub id would fail differently: no snapshot offline
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").mkdir()
    (tmp_path / "notes").write_text("not a folder")
    cfg = ModelConfig(source=source, cache_dir=str(tmp_path / "cache"))
    for attempt in (plan_model, prepare_model_impl):
        with pytest.raises(CheckpointError) as info:
            attempt(cfg)
        assert str(info.value).startswith(
            f"model.source {source!r}: no such file or folder ({where}; relative to {tmp_path}), and not a Hugging "
            "Face hub id (it looks like a path): fix the path"
        ), str(info.value)


def test_hub_ids_stay_hub_ids_and_neither_says_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").mkdir()
    assert plan_model(ModelConfig(source="org/model"), check_hub=False).kind == "hub"  # org/ is not here
    assert plan_model(ModelConfig(source="x/y", kind="hub"), check_hub=False).kind == "hub"  # asked for
    with pytest.raises(CheckpointError) as info:
        plan_model(ModelConfig(source="x/y"), check_hub=False)
    assert str(info.value).endswith("fix the path (or set model.kind: hub to pass it to vLLM as a hub id)")
    with pytest.raises(CheckpointError) as info:
        plan_model(ModelConfig(source="a b/c d"), check_hub=False)
    assert str(info.value) == (
        f"model.source 'a b/c d': no such file or folder (a b does not exist; relative to {tmp_path}), and not a "
        "Hugging Face hub id (a hub id is owner/name of letters, digits, '-', '_' and '.'): fix the path"
    )


# --- a .gguf must be one, checked in the plan (the dry run) ------------------------------------------


@pytest.mark.parametrize(
    ("content", "found"),
    [
        (b"<html>404 Not Found</html>", "it starts with b'<htm'"),
        (b"", "it is empty"),
        (b"GGU", "it starts with b'GGU'"),
    ],
)
def test_a_gguf_without_the_magic_bytes_fails_in_the_plan(content: bytes, found: str, tmp_path: Path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(content)
    cfg = ModelConfig(source=str(gguf), cache_dir=str(tmp_path / "cache"))
    expected = (
        f"model.source {str(gguf)!r}: {gguf} is not a GGUF file ({found}; a GGUF file starts with b'GGUF'): it is "
        "damaged, cut short or of another format; point model.source at a complete .gguf file"
    )
    started = time.perf_counter()
    for attempt in (plan_model, prepare_model_impl):
        with pytest.raises(CheckpointError) as info:
            attempt(cfg)
        assert str(info.value) == expected
    assert time.perf_counter() - started < 1.0  # no converter was started
    assert cache_entries(tmp_path / "cache") == []

    named = tmp_path / "weights.q4"  # model.kind: gguf for a file named otherwise
    named.write_bytes(content)
    with pytest.raises(CheckpointError, match=r"weights\.q4 is not a GGUF file"):
        plan_model(ModelConfig(source=str(named), kind="gguf", cache_dir=str(tmp_path / "cache")))


def test_a_gguf_url_without_the_magic_bytes_fails_in_the_plan(s3: dict[str, Any], tmp_path: Path) -> None:
    fs = s3fs.S3FileSystem(endpoint_url=s3["endpoint_url"], key=s3["key"], secret=s3["secret"])
    fs.mkdir("ckpt-magic")
    fs.pipe("ckpt-magic/m/model.gguf", b"<?xml version='1.0'?><Error>AccessDenied</Error>")
    fs.pipe("ckpt-magic/m/empty.gguf", b"")
    fs.pipe("ckpt-magic/m/good.gguf", b"GGUF" + bytes(60))
    cache = tmp_path / "cache"
    for name, found in (("model.gguf", "it starts with b'<?xm'"), ("empty.gguf", "it is empty")):
        url = f"s3://ckpt-magic/m/{name}"
        with pytest.raises(CheckpointError) as info:
            plan_model(ModelConfig(source=url, storage_options=s3, cache_dir=str(cache)))
        assert str(info.value).startswith(f"model.source {url!r}: {url} is not a GGUF file ({found}; ")
    good = plan_model(ModelConfig(source="s3://ckpt-magic/m/good.gguf", storage_options=s3, cache_dir=str(cache)))
    assert (good.kind, good.cache) == ("gguf", "unknown")  # checked, not downloaded
    assert cache_entries(cache) == []
