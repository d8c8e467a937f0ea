"""Turn the configured model source into a local Hugging Face folder that vLLM can serve.

Sources: the built-in default (SmolLM2 GGUF), an HF folder (served in place), a hub id (passed to
vLLM after a reachability check), a GGUF file, a DCP checkpoint in the NeMo RL layouts; each
local or at an fsspec URL (downloaded once into the cache). Conversions are cached under the cache
root as `<readable name>_<key>`, where the key covers the source's content (file hashes, memoised
per path/size/mtime/inode) and the conversion options, never only its path. One file lock per
entry makes concurrent runs convert once; conversions are written to a temporary folder, validated,
marked last and moved into place, so a crash never leaves a folder that looks complete.
`decide` makes every decision; `prepare_model_impl` carries it out, `plan_model` only shows it.
Both work outside a Prefect run (they log to the plain `evalflow` logger there).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import task
from prefect.context import TaskRunContext

from core.config import ModelConfig
from core.logs import get_logger
from tasks.checkpoints import entries
from tasks.checkpoints.decide import Decision, cache_root_of, decide
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.hashing import folder_fingerprint, key_of, memo_for
from tasks.checkpoints.light_check import check_hf_folder
from tasks.checkpoints.records import CONVERTED, Cache, ConversionMarker, ConvertedBy, ModelPlan
from tasks.checkpoints.results import FolderValidation
from tasks.checkpoints.runner import run_script
from tasks.runtime.venv import ensure_runtime

__all__ = ["CheckpointError", "ModelPlan", "PreparedModel", "plan_model", "prepare_model", "prepare_model_impl"]


@dataclass(frozen=True)
class PreparedModel:
    path: str  # local HF folder, or a hub id passed to vLLM as is
    served_name: str
    fingerprint: str  # content hash of the served weights/config/tokenizer: enters rollout cache keys
    source: str
    kind: str  # "gguf", "dcp", "hf", "hub" (or "external", made by the flow)
    cache_hit: bool = False  # no conversion (or validation) ran for this call


def convert(decision: Decision, cfg: ModelConfig) -> PreparedModel:
    job, entry = decision.job, decision.entry
    assert job is not None and entry is not None
    logger = get_logger()

    def produce(tmp: Path) -> ConversionMarker:
        started = time.monotonic()
        mb = job.source_bytes / 1e6
        logger.info("converting %s (%s, %.0f MB, %s) -> %s", cfg.source, job.kind, mb, cfg.dtype, entry.path)
        details = job.run(tmp)
        try:  # whatever the converter said: only a folder vLLM can load is published
            check_hf_folder(tmp)
        except CheckpointError as exc:
            raise CheckpointError(f"the conversion of {cfg.source} wrote no loadable model: {exc}") from None
        seconds = time.monotonic() - started
        logger.info("converted %s in %.1f s (%.0f MB/s of source)", cfg.source, seconds, mb / seconds)
        return ConversionMarker(
            architecture=details.architecture,
            parameters=details.parameters,
            dtype=details.dtype,
            files=details.files,
            fingerprint=folder_fingerprint(tmp),
            kind=job.kind,
            source=cfg.source,
            key=job.key,
            options=job.options,
            inputs=job.inputs,
            source_bytes=job.source_bytes,
            seconds=round(seconds, 3),
            converter=details,
            converted_by=ConvertedBy(pid=os.getpid(), host=socket.gethostname()),
            created=time.time(),
        )

    built = entries.ensure(
        entry.path, entry.lock, CONVERTED, produce, f"the conversion of {cfg.source}", entry.existing, cfg.force
    )
    if not built.built:
        logger.info("checkpoint cache hit: %s", built.path)
    name = decision.served_name
    return PreparedModel(str(built.path), name, built.info.fingerprint, cfg.source, job.kind, not built.built)


def execute(decision: Decision, cfg: ModelConfig, runtime_flavor: str) -> PreparedModel:
    """Carry out a decision made with `fetch=True` (nothing is left to download)."""
    name, fingerprint = decision.served_name, decision.fingerprint
    if decision.action in ("hit", "convert"):
        return convert(decision, cfg)
    assert fingerprint is not None, decision.action
    if decision.action == "pass-hub-id":
        return PreparedModel(cfg.source, name, fingerprint, cfg.source, "hub")
    folder = str(decision.folder)
    if decision.action == "serve-as-is":
        return PreparedModel(folder, name, fingerprint, cfg.source, "hf", True)
    assert decision.action == "serve-in-place", decision.action
    if not decision.validated:  # a full load once per content (again if forced): quick checks miss some breakage
        run_script(ensure_runtime(runtime_flavor), "hf_check.py", [folder], f"validating {folder}", FolderValidation)
        memo_for(cache_root_of(cfg)).mark_validated(fingerprint)
    return PreparedModel(folder, name, fingerprint, cfg.source, "hf", decision.validated)


def prepare_model_impl(cfg: ModelConfig, runtime_flavor: str = "auto") -> PreparedModel:
    """The served folder (or hub id) for `cfg`, converting and downloading only what the cache lacks."""
    try:
        return execute(decide(cfg, runtime_flavor, fetch=True), cfg, runtime_flavor)
    finally:
        memo_for(cache_root_of(cfg)).flush()


def describe(decision: Decision, dtype: str) -> str:
    """The decision's action in words (the dry run shows it)."""
    return {
        "serve-as-is": "serve the pre-converted folder as is (skip)",
        "pass-hub-id": "pass the hub id to vLLM",
        "serve-in-place": "serve the folder in place" + ("" if decision.validated else " (validated first)"),
        "download+serve": "download, then serve it in place",
        "download+convert": "download, then convert it (unless its content is cached)",
        "fetch+convert": f"fetch {decision.pending}, then convert",
        "hit": "use the cached conversion",
        "convert": f"convert ({decision.kind} -> HF, {dtype})",
    }[decision.action]


def cache_state(decision: Decision, force: bool) -> Cache:
    if decision.action == "hit":
        return "hit"
    if decision.action == "convert":
        return "forced" if force else "miss"
    return "unknown" if decision.action in ("download+serve", "download+convert", "fetch+convert") else "n/a"


def plan_model(cfg: ModelConfig, runtime_flavor: str = "auto", check_hub: bool = True) -> ModelPlan:
    """What `prepare_model_impl(cfg)` would do, without converting or downloading anything (its
    `model_dump()` is the plan as the dry runs print it). Local sources are hashed (memoised).
    Raises CheckpointError where prepare would fail before converting.
    """
    decision = decide(cfg, runtime_flavor, fetch=False, check_hub=check_hub)
    job = decision.job
    return ModelPlan(
        source=cfg.source,
        dtype=cfg.dtype,
        force=cfg.force,
        skip=cfg.skip,
        kind=decision.kind,
        served_name=decision.served_name,
        layout=decision.layout,
        download=decision.download.plan() if decision.download is not None else None,
        action=describe(decision, cfg.dtype),
        cache=cache_state(decision, cfg.force),
        target=decision.target,
        fingerprint=decision.fingerprint,
        light_check=decision.light_check,
        key=job.key if job is not None else None,
        convert=job.plan if job is not None else None,
    )


def _cache_key(context: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    """Prefect's cache key: the content key of the conversion (None: run the task, no caching)."""
    cfg: ModelConfig = parameters["cfg"]
    if cfg.force:
        return None
    try:
        decision = decide(cfg, parameters.get("runtime_flavor", "auto"), check_hub=False)
    except CheckpointError:
        return None  # the task runs and raises the clear error itself
    hub_id = decision.source if decision.kind == "hub" else None
    ident = decision.job.key if decision.job else decision.fingerprint or hub_id
    if ident is None:
        return None
    parts = {"id": ident, "kind": decision.kind, "target": decision.target, "name": decision.served_name}
    return f"prepare-model-{key_of(parts)}"


@task(name="prepare-model", cache_key_fn=_cache_key, persist_result=True, retries=0)
def prepare_model(cfg: ModelConfig, runtime_flavor: str = "auto") -> PreparedModel:
    """Prefect task: cached by the source's content, so a second run does not convert again."""
    return prepare_model_impl(cfg, runtime_flavor)
