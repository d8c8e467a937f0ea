"""The one decision of model preparation, shared by the dry run and the real run: what the source is and what it takes.

`decide(cfg, fetch=False)` only looks (lists remote sources, hashes local files, memoised) and stops
at what would have to be fetched; `decide(cfg, fetch=True)` first fetches what the answer depends on
(remote files, the vLLM runtime that holds the default GGUF), so its answer is always one that can be
executed. Either way the checks that fail a preparation before anything is converted run here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from core.config import DEFAULT_MODEL, ModelConfig, absolute_path
from core.logs import get_logger
from core.store import Store
from tasks.checkpoints import entries, hub, remote
from tasks.checkpoints.architectures import check_hf_architecture
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.hashing import MARKER, HashMemo, folder_fingerprint, memo_for
from tasks.checkpoints.jobs import Job, make_job, read_config
from tasks.checkpoints.light_check import check_hf_folder
from tasks.checkpoints.records import CONVERTED, ConversionMarker, DownloadPlan, FirstMarker, FolderCheck
from tasks.checkpoints.sources import Source, locate, readable
from tasks.runtime.venv import ensure_runtime, runtime_for

Action = Literal[
    "serve-as-is",  # model.skip: a pre-converted folder, checked lightly
    "pass-hub-id",  # vLLM loads the hub id itself
    "serve-in-place",  # an HF folder (validated once per content)
    "download+serve",  # dry run: a remote HF folder not downloaded yet
    "download+convert",  # dry run: a remote GGUF/DCP source not downloaded yet
    "fetch+convert",  # dry run: the runtime or config/tokenizer URLs are missing, so the key is unknown
    "hit",  # the conversion is in the cache (or output_dir)
    "convert",
]


@dataclass(frozen=True)
class Download:
    """A remote source's needed files and their copy in the cache (None: not downloaded yet)."""

    url: str
    files: int
    bytes: int
    key: str
    folder: Path | None

    def plan(self) -> DownloadPlan:
        folder = str(self.folder) if self.folder else None
        return DownloadPlan(
            url=self.url, files=self.files, bytes=self.bytes, key=self.key, cached=folder is not None, folder=folder
        )


@dataclass(frozen=True)
class Entry:
    """Where a conversion goes, its lock, and how to find it already built."""

    path: Path
    lock: Path
    existing: Callable[[], Path | None]


@dataclass(frozen=True)
class Decision:
    source: str
    kind: str  # "gguf", "dcp", "hf" or "hub"
    served_name: str
    action: Action
    folder: Path | None = None  # the folder served (skip, in place, hit) or written (convert)
    fingerprint: str | None = None  # the served content's identity, when known
    layout: str | None = None  # DCP: which NeMo RL layout
    download: Download | None = None  # remote sources
    job: Job | None = None  # hit, convert
    entry: Entry | None = None  # hit, convert
    light_check: FolderCheck | None = None  # served folders: what the quick check found
    validated: bool = False  # serve-in-place: this content was fully validated before (and not forced)
    pending: str | None = None  # fetch+convert: what must be fetched first

    @property
    def target(self) -> str | None:
        """What vLLM is given: the folder, or the hub id (None while a fetch is pending)."""
        if self.kind == "hub":
            return self.source
        return str(self.folder) if self.folder else None


def default_cache_root() -> Path:
    """EVALFLOW_CHECKPOINT_CACHE, else $XDG_CACHE_HOME/evalflow/checkpoints (~/.cache): absolute against the
    working directory of the process that reads it, so converters (other processes) write the same place."""
    root = os.environ.get("EVALFLOW_CHECKPOINT_CACHE")
    if root:
        return Path(absolute_path(root))
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(absolute_path(cache_home)) / "evalflow" / "checkpoints"


def cache_root_of(cfg: ModelConfig) -> Path:
    return Path(absolute_path(cfg.cache_dir)) if cfg.cache_dir else default_cache_root()


def served_name(cfg: ModelConfig, src: Source | None) -> str:
    if cfg.served_name:
        return cfg.served_name
    if cfg.source == DEFAULT_MODEL:
        return DEFAULT_MODEL
    return src.name if src else readable(Path(cfg.source.rstrip("/")).name)


def skipped_name(cfg: ModelConfig, folder: Path) -> str:
    return served_name(cfg, None) if cfg.source == DEFAULT_MODEL else cfg.served_name or readable(folder.name)


def loadable(folder: Path | None) -> Path | None:
    """`folder` if it holds what vLLM loads (config, weights, tokenizer), else None: a marked entry
    whose files are gone or were never written (an old evalflow's bug, a hand-edited cache) is no hit."""
    if folder is None:
        return None
    try:
        check_hf_folder(folder)
    except CheckpointError as exc:
        get_logger().warning("ignoring the cache entry %s: %s; converting again", folder, exc)
        return None
    return folder


def marker_of(folder: Path) -> ConversionMarker | FirstMarker | None:
    """The conversion marker in `folder`; None when it does not parse (a hand-edited cache): no hit."""
    try:
        return entries.read_marker(folder, CONVERTED)
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"]
        get_logger().warning(
            "ignoring the cache entry %s: its %s does not parse (%s); converting again", folder, MARKER, reason
        )
        return None


def entry_for(job: Job, cfg: ModelConfig, cache_root: Path) -> Entry:
    if not cfg.output_dir:

        def cached() -> Path | None:
            found = loadable(entries.find(cache_root, job.key, MARKER))
            return found if found is None or marker_of(found) is not None else None

        return Entry(cache_root / f"{readable(job.name)}_{job.key}", cache_root / f".{job.key}.lock", cached)
    out = Path(cfg.output_dir).expanduser().resolve()

    def existing() -> Path | None:
        if (out / MARKER).is_file() and (marker := marker_of(out)) is not None and marker.key == job.key:
            return loadable(out)
        return None

    return Entry(out, out.parent / f".{out.name}.lock", existing)


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


def fetched(src: Source, store: Store, downloads: Path, fetch: bool) -> tuple[Download, Source]:
    """A remote source's download (done now with `fetch`, else only looked up in the cache), and the
    source pointing at its local copy when there is one."""
    listing = src.listing
    assert listing is not None
    needed = list(src.layout.needed) if src.layout else list(listing.files)
    if fetch:
        folder: Path | None = remote.download(store, listing, needed, downloads, src.name)
    else:
        folder = remote.cached(listing, needed, downloads)
    size = sum(listing.files[rel].size for rel in needed)
    info = Download(listing.url, len(needed), size, remote.download_key(listing, needed), folder)
    if folder is None:
        return info, src
    return info, replace(src, local=folder / next(iter(listing.files)) if listing.is_file else folder)


def as_is(cfg: ModelConfig, folder: Path, name: str, memo: HashMemo, download: Download | None = None) -> Decision:
    """`model.skip`: a pre-converted folder, served without conversion after a light check."""
    if not folder.is_dir():
        raise CheckpointError(f"model.skip: {folder} is not a folder (convert it first, or drop model.skip)")
    light = check_hf_folder(folder)
    fingerprint = folder_fingerprint(folder, memo)
    return Decision(
        cfg.source, "hf", name, "serve-as-is", folder.resolve(), fingerprint, download=download, light_check=light
    )


def decide(cfg: ModelConfig, runtime_flavor: str = "auto", fetch: bool = False, check_hub: bool = True) -> Decision:
    """What preparing `cfg` takes. Raises CheckpointError wherever preparing would fail before converting."""
    cache_root = cache_root_of(cfg)
    memo = memo_for(cache_root)
    try:
        return _decide(cfg, runtime_flavor, fetch, check_hub, cache_root, memo)
    finally:
        memo.flush()  # the hashes survive a failed conversion


def _decide(
    cfg: ModelConfig, runtime_flavor: str, fetch: bool, check_hub: bool, cache_root: Path, memo: HashMemo
) -> Decision:
    if cfg.skip and cfg.output_dir:
        folder = Path(cfg.output_dir).expanduser()
        return as_is(cfg, folder, skipped_name(cfg, folder), memo)
    store = remote.store_of(cfg)
    src = locate(cfg, store, runtime_flavor, create_runtime=fetch)
    name = served_name(cfg, src)
    if cfg.skip and src.kind != "hf":
        raise CheckpointError(
            f"model.skip serves a pre-converted HF folder as is, but {cfg.source!r} is a {src.kind} source: set "
            "model.output_dir to the converted folder"
        )
    if src.kind == "hub":
        if cfg.output_dir:
            raise CheckpointError("model.output_dir: a hub id is passed to vLLM as is; there is nothing to convert")
        fingerprint = hub.fingerprint(cfg.source) if check_hub else None
        return Decision(cfg.source, "hub", name, "pass-hub-id", fingerprint=fingerprint)
    if src.kind == "hf" and cfg.output_dir:
        raise CheckpointError("model.output_dir: an HF folder is served in place; there is nothing to convert")
    layout = src.layout.dcp_layout if src.kind == "dcp" and src.layout else None
    download = None
    if src.listing is not None:
        download, src = fetched(src, store, cache_root / "downloads", fetch)
        if src.local is None:
            pending_download: Action = "download+serve" if src.kind == "hf" else "download+convert"
            return Decision(cfg.source, src.kind, name, pending_download, layout=layout, download=download)
    if src.kind == "hf":
        assert src.local is not None
        if cfg.skip:
            return as_is(cfg, src.local, name, memo, download)
        light = check_hf_folder(src.local)
        check_hf_architecture(cfg.source, read_config(src.local), runtime_for(runtime_flavor))
        fingerprint = folder_fingerprint(src.local, memo)
        validated = memo.is_validated(fingerprint) and not cfg.force
        return Decision(
            cfg.source, "hf", name, "serve-in-place", src.local.resolve(), fingerprint,
            download=download, light_check=light, validated=validated,
        )  # fmt: skip
    runtime = ensure_runtime(runtime_flavor) if fetch else runtime_for(runtime_flavor)
    job = make_job(src, cfg, store, runtime, cache_root / "downloads", memo, fetch)
    if job is None:
        pending = "the vLLM runtime (it holds the default GGUF)" if src.local is None else "config/tokenizer URLs"
        return Decision(cfg.source, src.kind, name, "fetch+convert", layout=layout, download=download, pending=pending)
    check_output_dir(cfg)
    entry = entry_for(job, cfg, cache_root)
    found = entry.existing()
    fingerprint = entries.read_marker(found, CONVERTED).fingerprint if found else None
    action: Action = "hit" if found and not cfg.force else "convert"
    return Decision(cfg.source, job.kind, name, action, found or entry.path, fingerprint, layout, download, job, entry)
