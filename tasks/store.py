"""The run store: every path evalflow writes goes through fsspec (local folder, s3://, ...).

Writes are atomic: on a local disk we write a temporary sibling and rename it into place; on object
stores a single PUT is already all-or-nothing. So a reader never sees a half-written file under
its final name.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from typing import Any

import fsspec
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem


class StoreError(RuntimeError):
    """The run store cannot be reached or written; the message says which URL and why."""


def filesystem(url: str, storage_options: dict[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """Return (filesystem, path) for a URL or local path."""
    try:
        return url_to_fs(url, **(storage_options or {}))
    except (ImportError, ValueError) as exc:
        raise StoreError(f"cannot open store URL {url!r}: {exc}") from exc


def join(base: str, *parts: str) -> str:
    """Join URL/path parts with '/' (fsspec URLs use forward slashes everywhere)."""
    if "://" in base:
        return posixpath.join(base, *parts)
    return os.path.join(base, *parts)


def is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def write_bytes(url: str, data: bytes, storage_options: dict[str, Any] | None = None) -> str:
    """Write `data` to `url` atomically and return the URL."""
    fs, path = filesystem(url, storage_options)
    if isinstance(fs, LocalFileSystem):
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    else:
        try:
            fs.pipe_file(path, data)
        except Exception as exc:  # s3fs raises a zoo of botocore/aiohttp errors
            raise StoreError(f"cannot write {url}: {exc}") from exc
    return url


def write_text(url: str, text: str, storage_options: dict[str, Any] | None = None) -> str:
    return write_bytes(url, text.encode("utf-8"), storage_options)


def read_bytes(url: str, storage_options: dict[str, Any] | None = None) -> bytes:
    fs, path = filesystem(url, storage_options)
    return fs.cat_file(path)


def read_text(url: str, storage_options: dict[str, Any] | None = None) -> str:
    return read_bytes(url, storage_options).decode("utf-8")


def copy(src: str, dst: str, storage_options: dict[str, Any] | None = None) -> str:
    """Copy a file within the store, atomically (batch files are small: read, then one write)."""
    fs, src_path = filesystem(src, storage_options)
    if not isinstance(fs, LocalFileSystem):
        _, dst_path = filesystem(dst, storage_options)
        fs.copy(src_path, dst_path)  # server-side copy: the object appears whole or not at all
        return dst
    return write_bytes(dst, fs.cat_file(src_path), storage_options)


def exists(url: str, storage_options: dict[str, Any] | None = None) -> bool:
    fs, path = filesystem(url, storage_options)
    return fs.exists(path)


def check_writable(url: str, storage_options: dict[str, Any] | None = None) -> None:
    """Fail early, before any expensive step, if the store cannot be written."""
    probe = join(url, f".evalflow-probe-{uuid.uuid4().hex}")
    try:
        write_bytes(probe, b"ok", storage_options)
        fs, path = filesystem(probe, storage_options)
        fs.rm_file(path)
    except StoreError:
        raise
    except Exception as exc:
        raise StoreError(
            f"the run store {url!r} is not writable ({type(exc).__name__}: {exc}); "
            "check the URL and credentials (store.url / store.storage_options)"
        ) from exc
