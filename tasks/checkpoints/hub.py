"""Hugging Face hub ids: passed to vLLM as is, but checked first.

An offline machine then fails in seconds with a message that says what to do, instead of minutes
into the server's start-up. The local HF cache counts (a snapshot there serves offline), and its
commit becomes part of the fingerprint, so a new revision of the same id is a different model.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx

from tasks.checkpoints.errors import CheckpointError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
HUB_ID_RULE = "owner/name of letters, digits, '-', '_' and '.'"
# names ending so are files, never hub ids
FILE_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt", ".pth", ".distcp", ".metadata", ".yaml", ".yml", ".json")
TIMEOUT_S = 5.0
TRUE = ("1", "true", "yes", "on")


def looks_like_hub_id(source: str) -> bool:
    return bool(HUB_ID.match(source)) and not source.endswith(FILE_SUFFIXES)


def cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    return home / "hub"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in TRUE


def cached_snapshot(repo_id: str, revision: str = "main") -> Path | None:
    """The local snapshot folder of a hub model (holding config.json), if the HF cache has one."""
    repo = cache_dir() / f"models--{repo_id.replace('/', '--')}"
    ref = repo / "refs" / revision
    if ref.is_file():
        snap = repo / "snapshots" / ref.read_text().strip()
        if (snap / "config.json").exists():
            return snap
    snaps = [p for p in (repo / "snapshots").glob("*") if (p / "config.json").exists()]
    return max(snaps, key=lambda p: p.stat().st_mtime) if snaps else None


def fingerprint(repo_id: str) -> str:
    """`hub:<id>@<commit>`; raise CheckpointError when vLLM would not be able to load it."""
    snap = cached_snapshot(repo_id)
    if snap is not None:
        return f"hub:{repo_id}@{snap.name}"
    hint = (
        "point model.source at a local HF folder, a .gguf file, a DCP checkpoint or an s3:// URL, "
        f"or put the model in the HF cache ({cache_dir()}) on a machine with network access"
    )
    if offline():
        raise CheckpointError(
            f"model.source {repo_id!r} is a Hugging Face hub id, HF_HUB_OFFLINE is set and the local HF cache "
            f"has no snapshot of it: {hint}"
        )
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    token = os.environ.get("HF_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        reply = httpx.get(f"{endpoint}/api/models/{repo_id}/revision/main", headers=headers, timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise CheckpointError(
            f"model.source {repo_id!r} is a Hugging Face hub id, but the hub at {endpoint} cannot be reached "
            f"({type(exc).__name__}: {exc}) and the local HF cache has no snapshot of it; this machine looks "
            f"offline: {hint}"
        ) from exc
    if reply.status_code in (401, 403):
        raise CheckpointError(f"hub model {repo_id!r} is gated or private: set HF_TOKEN, or {hint}")
    if reply.status_code == 404:
        raise CheckpointError(f"hub model {repo_id!r} does not exist (and {repo_id!r} is no local path either)")
    if reply.status_code != 200:
        raise CheckpointError(f"the hub at {endpoint} answered {reply.status_code} for {repo_id!r}")
    return f"hub:{repo_id}@{reply.json().get('sha', 'main')}"
