"""Conversion jobs: for a local GGUF or DCP source, what the cache key covers and how the HF folder is written."""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.config import ModelConfig
from core.store import Store
from tasks.checkpoints.architectures import HfConfig, check_gguf_architecture, check_hf_architecture
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.gguf_header import read_header
from tasks.checkpoints.hashing import HashMemo, key_of, sha256_file
from tasks.checkpoints.layout import TOKENIZER_FILES
from tasks.checkpoints.records import (
    DcpConversionPlan,
    DcpInputs,
    DcpOptions,
    GgufConversionPlan,
    GgufInputs,
    GgufOptions,
)
from tasks.checkpoints.results import Conversion, DcpCheck, DcpConversion, DcpJob, GgufConversion
from tasks.checkpoints.runner import Watch, run_script
from tasks.checkpoints.sources import DcpAssets, Source, dcp_assets
from tasks.runtime.venv import Runtime

CONVERTER_VERSION = "1"  # GGUF converter; bump when its output changes
DCP_CONVERTER_VERSION = "2"  # 2: records are CRC-checked; a 1 entry may hold silently damaged weights
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
MAX_SHARD_BYTES = 2_000_000_000  # per safetensors shard (save_pretrained's "2GB"); part of the key


@dataclass(frozen=True)
class Job:
    """One conversion: what its key covers, and how to write the HF folder into a given folder."""

    kind: str
    name: str
    key: str
    options: GgufOptions | DcpOptions
    inputs: GgufInputs | DcpInputs
    source_bytes: int
    run: Callable[[Path], Conversion]  # what the converter script reports
    plan: GgufConversionPlan | DcpConversionPlan  # shown by plan_model


def gguf_job(gguf: Path, cfg: ModelConfig, runtime: Runtime, name: str, memo: HashMemo) -> Job:
    try:  # the header and the size, before hashing or converting: a truncated file fails here, in the plan
        header = read_header(gguf)
    except CheckpointError as exc:
        raise CheckpointError(f"model.source {cfg.source!r}: {exc}") from None
    check_gguf_architecture(cfg.source, header.architecture, runtime)
    options = GgufOptions(converter=CONVERTER_VERSION, dtype=cfg.dtype)
    sha = sha256_file(gguf, memo)
    # the same formula as before this module grew other sources: existing entries stay valid
    key = hashlib.sha256((sha + json.dumps(options.model_dump(), sort_keys=True)).encode()).hexdigest()[:16]

    def run(out: Path) -> GgufConversion:
        args = [str(gguf.absolute()), str(out.absolute()), cfg.dtype]
        watch = Watch(out, header.elements * DTYPE_BYTES[cfg.dtype])
        what = f"converting model.source {cfg.source}"
        return run_script(runtime, "gguf_to_hf.py", args, what, GgufConversion, watch)

    size = gguf.stat().st_size
    inputs = GgufInputs(gguf={gguf.name: sha})
    plan = GgufConversionPlan(converter="gguf", bytes=size, options=options, gguf=str(gguf))
    return Job("gguf", name, key, options, inputs, size, run, plan)


def read_config(folder: Path) -> HfConfig:
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{folder / 'config.json'} cannot be read ({exc})") from None


def _hashes(folder: Path, names: list[str], memo: HashMemo) -> dict[str, str]:
    return {n: sha256_file(folder / n, memo) for n in sorted(names) if (folder / n).is_file()}


def dcp_job(assets: DcpAssets, cfg: ModelConfig, runtime: Runtime, name: str, memo: HashMemo) -> Job:
    assert assets.config_dir is not None and assets.tokenizer_dir is not None
    config_dir, tokenizer_dir, weights_dir = assets.config_dir, assets.tokenizer_dir, assets.weights_dir
    options = DcpOptions(converter=f"dcp-{DCP_CONVERTER_VERSION}", dtype=cfg.dtype, max_shard_bytes=MAX_SHARD_BYTES)
    shards = [p.name for p in weights_dir.iterdir() if p.name == ".metadata" or p.suffix == ".distcp"]
    inputs = DcpInputs(
        weights=_hashes(weights_dir, shards, memo),
        config=_hashes(config_dir, ["config.json", "generation_config.json"], memo),
        tokenizer=_hashes(tokenizer_dir, [*TOKENIZER_FILES, "generation_config.json"], memo),
    )
    check_hf_architecture(cfg.source, read_config(config_dir), runtime)
    checked = f"dcp-shards:{key_of(inputs.weights)}"  # once per content: torch takes seconds to import
    if runtime.is_complete() and not memo.is_validated(checked):
        what = f"checking model.source {cfg.source}"
        run_script(runtime, "dcp_check.py", [str(weights_dir.resolve())], what, DcpCheck)
        memo.mark_validated(checked)
    key = key_of({"kind": "dcp", **options.model_dump(), **inputs.model_dump()})
    size = sum((weights_dir / n).stat().st_size for n in shards)

    def run(out: Path) -> DcpConversion:
        job = DcpJob(
            weights_dir=str(weights_dir.resolve()),
            config_dir=str(config_dir.resolve()),
            tokenizer_dir=str(tokenizer_dir.resolve()),
            out_dir=str(out),
            dtype=cfg.dtype,
            max_shard_bytes=MAX_SHARD_BYTES,
        )
        with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="evalflow-dcp-job-") as fh:
            json.dump(job.model_dump(), fh)
            fh.flush()
            watch = Watch(out, size * DTYPE_BYTES[cfg.dtype] // 4)  # RL runs save fp32
            what = f"converting model.source {cfg.source}"
            return run_script(runtime, "dcp_to_hf.py", [fh.name], what, DcpConversion, watch)

    plan = DcpConversionPlan(
        converter="dcp",
        bytes=size,
        options=options,
        weights_dir=str(weights_dir),
        config_dir=str(config_dir),
        tokenizer_dir=str(tokenizer_dir),
        policy_model_name=assets.model_name,
    )
    return Job("dcp", name, key, options, inputs, size, run, plan)


def make_job(
    src: Source, cfg: ModelConfig, store: Store, runtime: Runtime, downloads: Path, memo: HashMemo, fetch: bool
) -> Job | None:
    """The conversion for a local GGUF or DCP source; None when its inputs are not here yet and `fetch`
    is off (the default model's runtime, config/tokenizer URLs not downloaded)."""
    if src.local is None:
        return None
    if src.kind == "gguf":
        return gguf_job(src.local, cfg, runtime, src.name, memo)
    assert src.layout is not None
    assets = dcp_assets(src.local, src.layout, cfg, store, downloads, not src.is_remote, fetch)
    if not assets.complete:
        return None
    return dcp_job(assets, cfg, runtime, src.name, memo)
