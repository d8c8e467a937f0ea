"""DCP (NeMo RL layouts) to served HF folders, for real, in the vLLM runtime: round trip, cache, options,
and the failures that must leave no cache entry behind."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.config import ModelConfig
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.hashing import MARKER, folder_fingerprint
from tasks.checkpoints.prepare import PreparedModel, plan_model, prepare_model_impl
from tasks.runtime.venv import Runtime
from tests.checkpoints.conftest import SMALL_LAYERS, build_dcp, cache_entries, copy_step

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def nemo_cache(dcp_nemo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, PreparedModel]:
    """The NeMo RL layout converted once into a module-wide cache."""
    cache = tmp_path_factory.mktemp("ckpt-cache")
    return cache, prepare_model_impl(ModelConfig(source=str(dcp_nemo), cache_dir=str(cache)))


def test_both_layouts_convert_to_exactly_the_original_folder(
    base_model: PreparedModel, dcp_nemo: Path, dcp_flat: Path, nemo_cache: tuple[Path, PreparedModel], tmp_path: Path
) -> None:
    cache, nemo = nemo_cache
    assert (nemo.kind, nemo.served_name, nemo.cache_hit) == ("dcp", "run-a-step_1", False)
    # fp32 DCP -> bf16 safetensors, lm_head dropped, same config/tokenizer files: bit-identical to the original
    assert nemo.fingerprint == base_model.fingerprint
    marker = json.loads((Path(nemo.path) / MARKER).read_text())
    assert marker["converter"]["key_prefix_stripped"] is True
    assert marker["converter"]["dropped_tied"] == ["lm_head.weight"]
    assert marker["converter"]["source_dtypes"] == ["float32"]
    assert marker["converter"]["safetensors_dtypes"] == ["BF16"]
    assert json.loads((Path(nemo.path) / "config.json").read_text())["dtype"] == "bfloat16"
    assert sorted(marker["inputs"]["weights"]) == [".metadata", "__0_0.distcp", "__0_1.distcp"]

    # the flat layout, pointed at its weights folder; config.yaml names a hub model: config given explicitly
    flat = prepare_model_impl(
        ModelConfig(source=str(dcp_flat / "policy/weights/model"), config_path=base_model.path, cache_dir=str(cache))
    )
    assert (flat.kind, flat.served_name) == ("dcp", "run-b-step_1")
    assert flat.fingerprint == base_model.fingerprint
    assert json.loads((Path(flat.path) / MARKER).read_text())["converter"]["key_prefix_stripped"] is False
    assert flat.path != nemo.path  # different sources (key names differ), same served content

    started = time.perf_counter()
    again = prepare_model_impl(ModelConfig(source=str(dcp_nemo), cache_dir=str(cache)))
    seconds = time.perf_counter() - started
    print(f"cache hit in-process: {seconds * 1000:.1f} ms")
    assert again.cache_hit and again.path == nemo.path and seconds < 0.5


HIT = """
import json, sys, time
from core.config import ModelConfig
from tasks.checkpoints.prepare import prepare_model_impl
started = time.perf_counter()
model = prepare_model_impl(ModelConfig(source=sys.argv[1], cache_dir=sys.argv[2]))
print(json.dumps({"seconds": time.perf_counter() - started, "hit": model.cache_hit, "path": model.path}))
"""


def test_a_hit_in_a_new_process_takes_milliseconds(dcp_nemo: Path, nemo_cache: tuple[Path, PreparedModel]) -> None:
    cache, nemo = nemo_cache
    out = subprocess.run(
        [sys.executable, "-c", HIT, str(dcp_nemo), str(cache)], capture_output=True, text=True, cwd=REPO, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"cache hit in a new process: {result['seconds'] * 1000:.1f} ms (652 MB of DCP shards, hashes memoised)")
    assert result["hit"] and result["path"] == nemo.path
    assert result["seconds"] < 0.5


def test_plan_reports_without_converting(
    dcp_nemo: Path, nemo_cache: tuple[Path, PreparedModel], tmp_path: Path
) -> None:
    cache, nemo = nemo_cache
    hit = plan_model(ModelConfig(source=str(dcp_nemo), cache_dir=str(cache)))
    assert (hit.kind, hit.cache, hit.target, hit.fingerprint) == ("dcp", "hit", nemo.path, nemo.fingerprint)
    shards = sum(f.stat().st_size for f in dcp_nemo.rglob("*.distcp"))  # the fp32 weights to read
    everything = sum(f.stat().st_size for f in dcp_nemo.rglob("*") if f.is_file())
    assert hit.layout and hit.layout.startswith("nemo-rl") and hit.convert and shards <= hit.convert.bytes <= everything

    fresh = tmp_path / "fresh"
    miss = plan_model(ModelConfig(source=str(dcp_nemo), cache_dir=str(fresh), dtype="float16"))
    assert miss.cache == "miss" and miss.key != hit.key  # the dtype is part of the key
    assert miss.action.startswith("convert") and miss.fingerprint is None
    assert cache_entries(fresh) == []  # a dry run builds nothing

    forced = plan_model(ModelConfig(source=str(dcp_nemo), cache_dir=str(cache), force=True))
    assert forced.cache == "forced"


def test_force_converts_again(dcp_nemo: Path, nemo_cache: tuple[Path, PreparedModel]) -> None:
    cache, nemo = nemo_cache
    before = json.loads((Path(nemo.path) / MARKER).read_text())["created"]
    forced = prepare_model_impl(ModelConfig(source=str(dcp_nemo), cache_dir=str(cache), force=True))
    after = json.loads((Path(forced.path) / MARKER).read_text())
    assert not forced.cache_hit and forced.path == nemo.path and after["created"] > before
    assert forced.fingerprint == nemo.fingerprint


def test_same_content_elsewhere_hits_and_a_new_checkpoint_at_the_same_path_misses(
    base_model: PreparedModel, runtime: Runtime, nemo_cache: tuple[Path, PreparedModel], tmp_path: Path
) -> None:
    cache, nemo = nemo_cache
    step = copy_step(Path(nemo.source), tmp_path / "run-c" / "step_1")
    moved = prepare_model_impl(ModelConfig(source=str(step), cache_dir=str(cache)))
    assert moved.cache_hit and moved.path == nemo.path  # keyed by content, not by path

    # the RL run writes a new checkpoint to the same path: new key, new folder, new fingerprint
    shutil.rmtree(step)
    build_dcp(runtime, base_model.path, step, "nemo-rl", files=2, noise_seed=1)
    changed = prepare_model_impl(ModelConfig(source=str(step), cache_dir=str(cache)))
    assert not changed.cache_hit
    assert changed.path != nemo.path and changed.fingerprint != nemo.fingerprint
    assert Path(nemo.path, MARKER).exists()  # the earlier conversion is still there for its content


def test_output_dir_and_skip(dcp_nemo: Path, base_model: PreparedModel, tmp_path: Path) -> None:
    out = tmp_path / "served"
    cfg = ModelConfig(source=str(dcp_nemo), output_dir=str(out), cache_dir=str(tmp_path / "cache"))
    model = prepare_model_impl(cfg)
    assert model.path == str(out.resolve()) and not model.cache_hit and (out / MARKER).exists()
    assert prepare_model_impl(cfg).cache_hit
    assert cache_entries(tmp_path / "cache") == []  # nothing in the cache: the output went where asked

    skipped = prepare_model_impl(ModelConfig(source=str(dcp_nemo), output_dir=str(out), skip=True))
    assert (skipped.kind, skipped.path, skipped.cache_hit) == ("hf", str(out.resolve()), True)
    assert skipped.fingerprint == model.fingerprint == folder_fingerprint(out)

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="not written by evalflow"):
        prepare_model_impl(ModelConfig(source=str(dcp_nemo), output_dir=str(foreign)))
    assert (foreign / "notes.txt").read_text() == "mine"
    with pytest.raises(CheckpointError, match="is not a folder"):
        prepare_model_impl(ModelConfig(source=str(dcp_nemo), output_dir=str(tmp_path / "nope"), skip=True))
    with pytest.raises(CheckpointError, match=r"set model\.output_dir"):
        prepare_model_impl(ModelConfig(source=str(dcp_nemo), skip=True))


def test_an_hf_folder_is_served_in_place_and_validated_once(base_model: PreparedModel, tmp_path: Path) -> None:
    cfg = ModelConfig(source=base_model.path, cache_dir=str(tmp_path / "cache"))
    first = prepare_model_impl(cfg)
    assert (first.kind, first.path, first.fingerprint, first.cache_hit) == (
        "hf",
        base_model.path,
        base_model.fingerprint,
        False,
    )
    assert prepare_model_impl(cfg).cache_hit  # validated before (memo), same content
    skipped = prepare_model_impl(ModelConfig(source=base_model.path, skip=True, cache_dir=str(tmp_path / "cache")))
    assert skipped.fingerprint == base_model.fingerprint


# --- failures: a clear error and no cache entry ------------------------------------------------------


def test_truncated_shard(dcp_nemo: Path, tmp_path: Path) -> None:
    step = copy_step(dcp_nemo, tmp_path / "run" / "step_1")
    shard = step / "policy/weights/__0_1.distcp"
    with shard.open("r+b") as fh:
        fh.truncate(shard.stat().st_size // 2)
    cache = tmp_path / "cache"
    with pytest.raises(CheckpointError, match=r"__0_1\.distcp is truncated: \d+ bytes, \.metadata needs"):
        prepare_model_impl(ModelConfig(source=str(step), cache_dir=str(cache)))
    assert cache_entries(cache) == []


def test_missing_metadata(dcp_nemo: Path, tmp_path: Path) -> None:
    step = copy_step(dcp_nemo, tmp_path / "run" / "step_1")
    (step / "policy/weights/.metadata").unlink()
    cache = tmp_path / "cache"
    with pytest.raises(CheckpointError, match=r"no \.metadata: the checkpoint is incomplete"):
        prepare_model_impl(ModelConfig(source=str(step), cache_dir=str(cache)))
    with pytest.raises(CheckpointError, match=r"no \.metadata"):
        plan_model(ModelConfig(source=str(step), cache_dir=str(cache)))
    assert cache_entries(cache) == []


def test_config_that_does_not_match_the_tensors(dcp_nemo: Path, base_model: PreparedModel, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong-config"
    wrong.mkdir()
    config = json.loads(Path(base_model.path, "config.json").read_text())
    config.update(num_hidden_layers=SMALL_LAYERS - 1, intermediate_size=1024)  # a layer short, narrower MLPs
    (wrong / "config.json").write_text(json.dumps(config))
    cache = tmp_path / "cache"
    with pytest.raises(CheckpointError) as info:
        prepare_model_impl(ModelConfig(source=str(dcp_nemo), config_path=str(wrong), cache_dir=str(cache)))
    message = str(info.value)
    assert "do not match the architecture" in message
    assert f"unexpected, e.g. model.layers.{SMALL_LAYERS - 1}." in message
    assert "model.layers.0.mlp.down_proj.weight: checkpoint [576, 1536], architecture [576, 1024]" in message
    assert cache_entries(cache) == []


def test_hub_model_name_without_config_path(dcp_flat: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty HF cache
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    cache = tmp_path / "cache"
    with pytest.raises(
        CheckpointError, match=r"policy\.model_name='HuggingFaceTB/SmolLM2-135M-Instruct'.*model\.config_path"
    ):
        prepare_model_impl(ModelConfig(source=str(dcp_flat), cache_dir=str(cache)))
    assert cache_entries(cache) == []


def test_the_prefect_task_is_cached_by_content(prefect_home: Path, base_model: PreparedModel, tmp_path: Path) -> None:
    from prefect import flow

    from tasks.checkpoints.prepare import prepare_model

    @flow
    def prepare_twice(cfg: ModelConfig) -> tuple:
        return prepare_model(cfg, return_state=True), prepare_model(cfg, return_state=True)

    first, second = prepare_twice(ModelConfig(source=base_model.path, cache_dir=str(tmp_path / "cache")))
    assert first.is_completed() and second.name == "Cached"
    assert second.result() == first.result()
    forced = prepare_twice(ModelConfig(source=base_model.path, cache_dir=str(tmp_path / "cache"), force=True))
    assert [state.name for state in forced] == ["Completed", "Completed"]  # force: never from the cache


def test_a_bf16_save_converts_to_exactly_the_original_folder(
    base_model: PreparedModel, runtime: Runtime, tmp_path: Path
) -> None:
    """A bf16 trainer's DCP (the e2e training run's steps are such): no cast, the same bytes as the original."""
    step = tmp_path / "run-bf16" / "step_1"
    build_dcp(runtime, base_model.path, step, "nemo-rl", dtype="bfloat16")
    model = prepare_model_impl(ModelConfig(source=str(step), cache_dir=str(tmp_path / "cache")))
    assert model.fingerprint == base_model.fingerprint
    marker = json.loads((Path(model.path) / MARKER).read_text())
    assert (marker["converter"]["source_dtypes"], marker["converter"]["safetensors_dtypes"]) == (["bfloat16"], ["BF16"])
