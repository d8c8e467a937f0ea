"""Turn the configured model source into a local Hugging Face folder that vLLM can serve.

Sources: the built-in default (SmolLM2 GGUF), an HF folder (served in place), a hub id (passed to
vLLM after a reachability check), a GGUF file, a DCP checkpoint in the NeMo RL layouts; each
local or at an fsspec URL (downloaded once into the cache). Conversions are cached under the cache
root as `<readable name>_<key>`, where the key covers the source's content (file hashes, memoised
per path/size/mtime/inode) and the conversion options, never only its path. One file lock per
entry makes concurrent runs convert once; conversions are written to a temporary folder, validated,
marked last and moved into place, so a crash never leaves a folder that looks complete.
`plan_model` says what would happen without converting or downloading anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from prefect import task
from prefect.context import TaskRunContext

from core.config import DEFAULT_MODEL, ModelConfig
from core.logs import get_logger
from tasks.checkpoints import entries, hub, remote
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.hashing import MARKER, HashMemo, folder_fingerprint, key_of, memo_for, sha256_file
from tasks.checkpoints.layout import TOKENIZER_FILES
from tasks.checkpoints.light_check import check_hf_folder
from tasks.checkpoints.runner import run_script
from tasks.checkpoints.sources import DcpAssets, Source, dcp_assets, find_default_gguf, locate, readable
from tasks.runtime.venv import Runtime, ensure_runtime, runtime_for

__all__ = [
    "MARKER",
    "CheckpointError",
    "PreparedModel",
    "find_default_gguf",
    "folder_fingerprint",
    "plan_model",
    "prepare_model",
    "prepare_model_impl",
    "readable",
    "sha256_file",
]

CONVERTER_VERSION = "1"  # GGUF converter; bump when its output changes
DCP_CONVERTER_VERSION = "1"
MAX_SHARD_BYTES = 2_000_000_000  # per safetensors shard (save_pretrained's "2GB"); part of the key


@dataclass(frozen=True)
class PreparedModel:
    path: str  # local HF folder, or a hub id passed to vLLM as is
    served_name: str
    fingerprint: str  # content hash of the served weights/config/tokenizer: enters rollout cache keys
    source: str
    kind: str  # "gguf", "dcp", "hf", "hub" (or "external", made by the flow)
    cache_hit: bool = False  # no conversion (or validation) ran for this call

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Job:
    """One conversion: what its key covers, and how to write the HF folder into a given folder."""

    kind: str
    name: str
    key: str
    options: dict[str, Any]
    inputs: dict[str, Any]
    source_bytes: int
    run: Callable[[Path], dict[str, Any]]
    details: dict[str, Any]  # for plan_model


@dataclass(frozen=True)
class Target:
    path: Path
    lock: Path
    existing: Callable[[], Path | None]


def default_cache_root() -> Path:
    root = os.environ.get("EVALFLOW_CHECKPOINT_CACHE")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "evalflow" / "checkpoints"


def cache_root_of(cfg: ModelConfig) -> Path:
    return Path(cfg.cache_dir).expanduser() if cfg.cache_dir else default_cache_root()


def served_name(cfg: ModelConfig, src: Source | None) -> str:
    if cfg.served_name:
        return cfg.served_name
    if cfg.source == DEFAULT_MODEL:
        return DEFAULT_MODEL
    return src.name if src else readable(Path(cfg.source.rstrip("/")).name)


def skipped_name(cfg: ModelConfig, folder: Path) -> str:
    return served_name(cfg, None) if cfg.source == DEFAULT_MODEL else cfg.served_name or readable(folder.name)


# --- jobs ------------------------------------------------------------------------------------------


def gguf_job(gguf: Path, cfg: ModelConfig, runtime: Runtime, name: str, memo: HashMemo) -> Job:
    options = {"converter": CONVERTER_VERSION, "dtype": cfg.dtype}
    sha = sha256_file(gguf, memo)
    # the same formula as before this module grew other sources: existing entries stay valid
    key = hashlib.sha256((sha + json.dumps(options, sort_keys=True)).encode()).hexdigest()[:16]

    def run(out: Path) -> dict[str, Any]:
        return run_script(runtime, "gguf_to_hf.py", [str(gguf), str(out), cfg.dtype], f"converting {gguf.name}")

    size = gguf.stat().st_size
    return Job("gguf", name, key, options, {"gguf": {gguf.name: sha}}, size, run, {"gguf": str(gguf)})


def _hashes(folder: Path, names: list[str], memo: HashMemo) -> dict[str, str]:
    return {n: sha256_file(folder / n, memo) for n in sorted(names) if (folder / n).is_file()}


def dcp_job(assets: DcpAssets, cfg: ModelConfig, runtime: Runtime, name: str, memo: HashMemo) -> Job:
    assert assets.config_dir is not None and assets.tokenizer_dir is not None
    config_dir, tokenizer_dir, weights_dir = assets.config_dir, assets.tokenizer_dir, assets.weights_dir
    options = {"converter": f"dcp-{DCP_CONVERTER_VERSION}", "dtype": cfg.dtype, "max_shard_bytes": MAX_SHARD_BYTES}
    shards = [p.name for p in weights_dir.iterdir() if p.name == ".metadata" or p.suffix == ".distcp"]
    inputs = {
        "weights": _hashes(weights_dir, shards, memo),
        "config": _hashes(config_dir, ["config.json", "generation_config.json"], memo),
        "tokenizer": _hashes(tokenizer_dir, [*TOKENIZER_FILES, "generation_config.json"], memo),
    }
    key = key_of({"kind": "dcp", **options, **inputs})
    size = sum((weights_dir / n).stat().st_size for n in shards)

    def run(out: Path) -> dict[str, Any]:
        job = {
            "weights_dir": str(weights_dir.resolve()),
            "config_dir": str(config_dir.resolve()),
            "tokenizer_dir": str(tokenizer_dir.resolve()),
            "out_dir": str(out),
            "dtype": cfg.dtype,
            "max_shard_bytes": MAX_SHARD_BYTES,
        }
        with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="evalflow-dcp-job-") as fh:
            json.dump(job, fh)
            fh.flush()
            return run_script(runtime, "dcp_to_hf.py", [fh.name], f"converting {name}")

    details = {
        "weights_dir": str(weights_dir),
        "config_dir": str(config_dir),
        "tokenizer_dir": str(tokenizer_dir),
        "policy_model_name": assets.model_name,
    }
    return Job("dcp", name, key, options, inputs, size, run, details)


def make_job(
    src: Source, cfg: ModelConfig, runtime: Runtime, cache_root: Path, memo: HashMemo, dry: bool = False
) -> Job | None:
    """The conversion for a local GGUF or DCP source (None in a dry run whose inputs are not here yet)."""
    name = src.name
    if src.local is None:
        return None
    if src.kind == "gguf":
        return gguf_job(src.local, cfg, runtime, name, memo)
    assert src.layout is not None
    assets = dcp_assets(src.local, src.layout, cfg, cache_root / "downloads", not src.is_remote, not dry)
    if not assets.complete:
        return None
    return dcp_job(assets, cfg, runtime, name, memo)


def target_for(job: Job, cfg: ModelConfig, cache_root: Path) -> Target:
    if not cfg.output_dir:
        return Target(
            cache_root / f"{readable(job.name)}_{job.key}",
            cache_root / f".{job.key}.lock",
            lambda: entries.find(cache_root, job.key, MARKER),
        )
    out = Path(cfg.output_dir).expanduser().resolve()

    def existing() -> Path | None:
        if (out / MARKER).is_file() and entries.read_marker(out, MARKER).get("key") == job.key:
            return out
        return None

    return Target(out, out.parent / f".{out.name}.lock", existing)


def check_output_dir(cfg: ModelConfig) -> None:
    """An explicit output folder that evalflow did not write is never overwritten unasked."""
    if not cfg.output_dir:
        return
    out = Path(cfg.output_dir).expanduser()
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file() and not cfg.force:
        raise CheckpointError(
            f"model.output_dir {out} exists and was not written by evalflow: set model.force to replace it, or "
            "model.skip to serve it as is"
        )


def convert(job: Job, target: Target, cfg: ModelConfig, name: str) -> PreparedModel:
    logger = get_logger()

    def produce(tmp: Path) -> dict[str, Any]:
        started = time.monotonic()
        mb = job.source_bytes / 1e6
        logger.info("converting %s (%s, %.0f MB, %s) -> %s", cfg.source, job.kind, mb, cfg.dtype, target.path)
        details = job.run(tmp)
        seconds = time.monotonic() - started
        logger.info("converted %s in %.1f s (%.0f MB/s of source)", cfg.source, seconds, mb / seconds)
        return {
            **{k: details.get(k) for k in ("architecture", "parameters", "dtype", "files")},
            "fingerprint": folder_fingerprint(tmp),
            "kind": job.kind,
            "source": cfg.source,
            "key": job.key,
            "options": job.options,
            "inputs": job.inputs,
            "source_bytes": job.source_bytes,
            "seconds": round(seconds, 3),
            "converter": details,
            "converted_by": {"pid": os.getpid(), "host": socket.gethostname()},
            "created": time.time(),
        }

    check_output_dir(cfg)
    built = entries.ensure(
        target.path, target.lock, MARKER, produce, f"the conversion of {cfg.source}", target.existing, cfg.force
    )
    if not built.built:
        logger.info("checkpoint cache hit: %s", built.path)
    return PreparedModel(str(built.path), name, built.info["fingerprint"], cfg.source, job.kind, not built.built)


# --- sources served as they are ------------------------------------------------------------------


def materialize(src: Source, cfg: ModelConfig, cache_root: Path) -> Source:
    """A remote source's needed files, downloaded once into the cache; a local source as it is."""
    if src.listing is None:
        return src
    needed = list(src.layout.needed) if src.layout else list(src.listing.files)
    folder = remote.download(src.listing, needed, cache_root / "downloads", src.name, cfg.storage_options)
    local = folder / next(iter(src.listing.files)) if src.listing.is_file else folder
    return replace(src, local=local)


def serve_in_place(folder: Path, cfg: ModelConfig, name: str, runtime_flavor: str, memo: HashMemo) -> PreparedModel:
    """An HF folder: checked quickly, fingerprinted, fully validated once per content (again if forced)."""
    check_hf_folder(folder)
    fingerprint = folder_fingerprint(folder, memo)
    seen = memo.is_validated(fingerprint) and not cfg.force
    if not seen:
        run_script(ensure_runtime(runtime_flavor), "hf_check.py", [str(folder.resolve())], f"validating {folder}")
        memo.mark_validated(fingerprint)
    return PreparedModel(str(folder.resolve()), name, fingerprint, cfg.source, "hf", seen)


def use_as_is(cfg: ModelConfig, runtime_flavor: str, cache_root: Path, memo: HashMemo) -> PreparedModel:
    """`model.skip`: a pre-converted folder (output_dir, or an HF source) served without conversion."""
    if cfg.output_dir:
        folder = Path(cfg.output_dir).expanduser()
        name = skipped_name(cfg, folder)
    else:
        src = locate(cfg, runtime_flavor)
        if src.kind != "hf":
            raise CheckpointError(
                f"model.skip serves a pre-converted HF folder as is, but {cfg.source!r} is a {src.kind} source: set "
                "model.output_dir to the converted folder"
            )
        src = materialize(src, cfg, cache_root)
        assert src.local is not None
        folder, name = src.local, served_name(cfg, src)
    if not folder.is_dir():
        raise CheckpointError(f"model.skip: {folder} is not a folder (convert it first, or drop model.skip)")
    check_hf_folder(folder)
    return PreparedModel(str(folder.resolve()), name, folder_fingerprint(folder, memo), cfg.source, "hf", True)


# --- entry points ----------------------------------------------------------------------------------


def prepare_model_impl(cfg: ModelConfig, runtime_flavor: str = "auto") -> PreparedModel:
    """The served folder (or hub id) for `cfg`, converting and downloading only what the cache lacks."""
    cache_root = cache_root_of(cfg)
    memo = memo_for(cache_root)
    try:
        if cfg.skip:
            return use_as_is(cfg, runtime_flavor, cache_root, memo)
        src = locate(cfg, runtime_flavor)
        name = served_name(cfg, src)
        if src.kind == "hub":
            if cfg.output_dir:
                raise CheckpointError("model.output_dir: a hub id is passed to vLLM as is; there is nothing to convert")
            return PreparedModel(cfg.source, name, hub.fingerprint(cfg.source), cfg.source, "hub")
        if src.kind == "hf" and cfg.output_dir:
            raise CheckpointError("model.output_dir: an HF folder is served in place; there is nothing to convert")
        src = materialize(src, cfg, cache_root)
        assert src.local is not None
        if src.kind == "hf":
            return serve_in_place(src.local, cfg, name, runtime_flavor, memo)
        job = make_job(src, cfg, ensure_runtime(runtime_flavor), cache_root, memo)
        assert job is not None
        memo.flush()  # the hashes survive a failed conversion
        return convert(job, target_for(job, cfg, cache_root), cfg, name)
    finally:
        memo.flush()


def plan_model(cfg: ModelConfig, runtime_flavor: str = "auto", check_hub: bool = True) -> dict[str, Any]:
    """What `prepare_model_impl(cfg)` would do, without converting or downloading anything.

    Keys: source, kind, action, cache ("hit", "miss", "forced", "n/a" or "unknown"), target,
    served_name, fingerprint (when known), key (conversions), download (remote sources),
    convert (conversions: converter inputs and source bytes). Local sources are hashed (memoised).
    Raises CheckpointError where prepare would fail before converting.
    """
    cache_root = cache_root_of(cfg)
    memo = memo_for(cache_root)
    plan: dict[str, Any] = {"source": cfg.source, "dtype": cfg.dtype, "force": cfg.force, "skip": cfg.skip}
    try:
        if cfg.skip and cfg.output_dir:
            folder = Path(cfg.output_dir).expanduser()
            fingerprint = folder_fingerprint(folder, memo) if folder.is_dir() else None
            plan.update(kind="hf", action="serve the pre-converted folder as is (skip)", cache="n/a")
            plan.update(target=str(folder), exists=folder.is_dir(), fingerprint=fingerprint)
            plan["served_name"] = skipped_name(cfg, folder)
            return plan
        src = locate(cfg, runtime_flavor, create_runtime=False)
        plan.update(kind=src.kind, served_name=served_name(cfg, src))
        if src.layout is not None and src.kind == "dcp":
            plan["layout"] = src.layout.dcp_layout
        if src.kind == "hub":
            fingerprint = hub.fingerprint(cfg.source) if check_hub else None
            plan.update(action="pass the hub id to vLLM", cache="n/a", target=cfg.source, fingerprint=fingerprint)
            return plan
        if src.listing is not None:
            needed = list(src.layout.needed) if src.layout else list(src.listing.files)
            found = remote.cached(src.listing, needed, cache_root / "downloads")
            plan["download"] = {
                "url": src.listing.url,
                "files": len(needed),
                "bytes": sum(src.listing.files[rel].size for rel in needed),
                "key": remote.download_key(src.listing, needed),
                "cached": found is not None,
                "folder": str(found) if found else None,
            }
            if found is None:
                then = "serve it in place" if src.kind == "hf" else "convert it (unless its content is cached)"
                plan.update(action=f"download, then {then}", cache="unknown", target=None)
                return plan
            src = replace(src, local=found / next(iter(src.listing.files)) if src.listing.is_file else found)
        if src.kind == "hf":
            assert src.local is not None
            fingerprint = folder_fingerprint(src.local, memo)
            action = "serve the folder in place" + ("" if memo.is_validated(fingerprint) else " (validated first)")
            plan.update(action=action, cache="n/a", target=str(src.local.resolve()), fingerprint=fingerprint)
            plan["light_check"] = check_hf_folder(src.local)
            return plan
        job = make_job(src, cfg, runtime_for(runtime_flavor), cache_root, memo, dry=True)
        if job is None:
            what = "the vLLM runtime (it holds the default GGUF)" if src.local is None else "config/tokenizer URLs"
            plan.update(action=f"fetch {what}, then convert", cache="unknown", target=None)
            return plan
        target = target_for(job, cfg, cache_root)
        found = target.existing()
        cache = "forced" if cfg.force else ("hit" if found else "miss")
        plan.update(key=job.key, target=str(found or target.path), cache=cache)
        plan["action"] = "use the cached conversion" if cache == "hit" else f"convert ({job.kind} -> HF, {cfg.dtype})"
        plan["fingerprint"] = entries.read_marker(found, MARKER)["fingerprint"] if found else None
        plan["convert"] = {"converter": job.kind, "bytes": job.source_bytes, "options": job.options, **job.details}
        return plan
    finally:
        memo.flush()


def _cache_key(context: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    """Prefect's cache key: the content key of the conversion (None: run the task, no caching)."""
    cfg: ModelConfig = parameters["cfg"]
    if cfg.force:
        return None
    try:
        plan = plan_model(cfg, parameters.get("runtime_flavor", "auto"), check_hub=False)
    except CheckpointError:
        return None  # the task runs and raises the clear error itself
    ident = plan.get("key") or plan.get("fingerprint") or (plan["source"] if plan["kind"] == "hub" else None)
    if ident is None:
        return None
    parts = {"id": ident, "kind": plan["kind"], "target": plan.get("target"), "name": plan.get("served_name")}
    return f"prepare-model-{key_of(parts)}"


@task(name="prepare-model", cache_key_fn=_cache_key, persist_result=True, retries=0)
def prepare_model(cfg: ModelConfig, runtime_flavor: str = "auto") -> PreparedModel:
    """Prefect task: cached by the source's content, so a second run does not convert again."""
    return prepare_model_impl(cfg, runtime_flavor)
