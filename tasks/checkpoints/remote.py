"""Checkpoints on S3 or another fsspec URL: listed without reading, downloaded once into the cache.

Every URL is reached through one `core.store.Store` built from `model.source` and
`model.storage_options` (its S3 calls have timeouts; its credentials never reach a message, a log
line or a marker). A download is a cache entry under `<cache>/downloads/`, keyed by the URL and each
needed file's size and ETag (the modification time where a store has no ETag), and built like every
entry (temporary folder, marker last, `os.replace`, one file lock): concurrent runs download once, a
changed object downloads again, and an interrupted download is never mistaken for a complete one.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import fsspec

from core.config import ModelConfig
from core.logs import get_logger
from core.store import Store, StoreError
from tasks.checkpoints import entries
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.hashing import key_of
from tasks.checkpoints.records import DownloadMarker

DOWNLOAD_MARKER = ".evalflow-download.json"  # a dot-file: not part of the served folder's fingerprint
DOWNLOADED = entries.MarkerFile(DOWNLOAD_MARKER, DownloadMarker.model_validate_json)
STAMP_FIELDS = ("ETag", "etag", "md5Hash", "LastModified", "mtime", "updated", "created")


@dataclass(frozen=True)
class RemoteFile:
    size: int
    stamp: str  # ETag where the store has one, else the modification time


@dataclass(frozen=True)
class Listing:
    url: str
    is_file: bool
    files: dict[str, RemoteFile]  # relative path -> info (a single file: its base name)

    def sizes(self) -> dict[str, int]:
        return {rel: f.size for rel, f in self.files.items()}


def is_url(source: str) -> bool:
    return "://" in source and not source.startswith("file://")


def store_of(cfg: ModelConfig) -> Store:
    """How every URL of `cfg` (source, config_path, tokenizer_path) is reached."""
    return Store(cfg.source, cfg.storage_options)


def open_fs(store: Store, url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    try:
        return store.filesystem(url)
    except StoreError as exc:
        raise CheckpointError(f"cannot open {url} ({exc.__cause__}); check the URL and model.storage_options") from exc


def _remote_file(info: dict[str, Any]) -> RemoteFile:  # fsspec's `info` of one file
    stamp = next((info[k] for k in STAMP_FIELDS if info.get(k) is not None), "")
    return RemoteFile(int(info.get("size") or 0), str(stamp))


def list_url(store: Store, url: str) -> Listing:
    """Every file under `url` (or the file itself) with size and ETag; reads no content."""
    fs, path = open_fs(store, url)
    path = path.rstrip("/")
    try:
        fs.invalidate_cache()  # a changed object must look changed, even within one process
        info = fs.info(path)
        if info.get("type") == "file":
            return Listing(url.rstrip("/"), True, {posixpath.basename(path): _remote_file(info)})
        found = cast(dict[str, dict[str, Any]], fs.find(path, detail=True))  # detail=True: path -> its info
    except FileNotFoundError as exc:
        raise CheckpointError(f"{url}: nothing there (check the bucket, the prefix and the endpoint)") from exc
    except Exception as exc:  # s3fs raises a zoo of botocore/aiohttp errors
        raise CheckpointError(
            f"cannot list {url} ({type(exc).__name__}: {exc}); check the URL and model.storage_options "
            "(endpoint_url, credentials)"
        ) from exc
    files = {}
    for full, meta in found.items():
        rel = full[len(path) :].lstrip("/")
        if rel and meta.get("type", "file") == "file":
            files[rel] = _remote_file(meta)
    if not files:
        raise CheckpointError(f"{url}: no files there")
    return Listing(url.rstrip("/"), False, files)


def head(store: Store, listing: Listing, size: int) -> bytes:
    """The first `size` bytes of a listed single file (one ranged read)."""
    if next(iter(listing.files.values())).size == 0:
        return b""
    fs, path = open_fs(store, listing.url)
    try:
        return cast(bytes, fs.cat_file(path, start=0, end=size))  # bytes (fsspec is untyped: inferred str | bytes)
    except Exception as exc:  # s3fs raises a zoo of botocore/aiohttp errors
        raise CheckpointError(
            f"cannot read {listing.url} ({type(exc).__name__}: {exc}); check the URL and model.storage_options"
        ) from exc


def readable_tail(url: str) -> str:
    return posixpath.basename(url.split("://", 1)[-1].rstrip("/")) or "remote"


def download_key(listing: Listing, needed: Iterable[str]) -> str:
    return key_of(
        {"url": listing.url, "files": {rel: [listing.files[rel].size, listing.files[rel].stamp] for rel in needed}}
    )


def cached(listing: Listing, needed: Iterable[str], root: Path) -> Path | None:
    return entries.find(root, download_key(listing, needed), DOWNLOAD_MARKER)


def download(store: Store, listing: Listing, needed: Iterable[str], root: Path, name: str) -> Path:
    """The local copy of `needed` files of a listing (downloaded now, or found in the cache)."""
    needed = sorted(needed)
    key = download_key(listing, needed)
    total = sum(listing.files[rel].size for rel in needed)

    def fetch(tmp: Path) -> DownloadMarker:
        fs, base = open_fs(store, listing.url)
        base = base.rstrip("/")
        started = time.monotonic()
        get_logger().info("downloading %d files (%.1f MB) from %s", len(needed), total / 1e6, listing.url)
        for rel in needed:
            local = tmp / rel
            local.parent.mkdir(parents=True, exist_ok=True)
            remote = base if listing.is_file else f"{base}/{rel}"
            try:
                fs.get_file(remote, str(local))
            except Exception as exc:
                raise CheckpointError(f"downloading {listing.url}/{rel} failed ({type(exc).__name__}: {exc})") from exc
            if local.stat().st_size != listing.files[rel].size:
                raise CheckpointError(f"{listing.url}/{rel} changed while it was downloaded; try again")
        seconds = time.monotonic() - started
        get_logger().info("downloaded %.1f MB in %.1f s", total / 1e6, seconds)
        files = {rel: (listing.files[rel].size, listing.files[rel].stamp) for rel in needed}
        return DownloadMarker(url=listing.url, files=files, bytes=total, seconds=round(seconds, 3), created=time.time())

    built = entries.ensure(
        target=root / f"{name}_{key}",
        lock_path=root / f".{key}.lock",
        marker=DOWNLOADED,
        produce=fetch,
        what=f"the download of {listing.url}",
        existing=lambda: entries.find(root, key, DOWNLOAD_MARKER),
    )
    return built.path
