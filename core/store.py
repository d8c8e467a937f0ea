"""The run store: one object (URL, fsspec options, credentials) through which evalflow reads and
writes every file, local or on an object store.

Writes are atomic: on a local disk a temporary sibling is written and renamed into place; on object
stores a single PUT is already all-or-nothing. So a reader never sees a half-written file under its
final name. Credentials live only inside the object: they are never in its repr, never pickled (a
Store unpickled elsewhere falls back to the environment's credentials, as s3fs does), and never in
`public_options`, which is what may be saved or shown.
"""

from __future__ import annotations

import mimetypes
import os
import posixpath
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, cast

import fsspec  # pyright: ignore[reportMissingTypeStubs]  # fsspec ships no type stubs (its calls are typed below)
from fsspec.implementations.local import (  # pyright: ignore[reportMissingTypeStubs]  # fsspec ships no type stubs
    LocalFileSystem,
)

from core import secrets
from errors import EvalflowError

# Every S3 network call has a timeout: an unreachable endpoint fails in seconds, not minutes.
S3_TIMEOUTS = {"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 2}}


def content_type(path: str) -> str:
    return mimetypes.guess_type(path)[0] or "application/octet-stream"


def _protocols(fs: Any) -> tuple[str, ...]:
    return (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)


class _FileSystem(Protocol):
    """The calls the store makes on an fsspec filesystem, with the types fsspec documents (its code has no
    annotations): `cat_file` reads bytes, `glob` (without `detail`) lists paths."""

    def cat_file(self, path: str) -> bytes: ...
    def pipe_file(self, path: str, value: bytes, **kwargs: Any) -> None: ...
    def exists(self, path: str) -> bool: ...
    def copy(self, path1: str, path2: str) -> None: ...
    def glob(self, path: str) -> list[str]: ...
    def unstrip_protocol(self, name: str) -> str: ...
    def rm_file(self, path: str) -> None: ...


class StoreError(EvalflowError, RuntimeError):
    """The store cannot be reached or written; the message says which URL and why."""

    kind = "store"


def join(base: str, *parts: str) -> str:
    """Join URL/path parts with '/' (fsspec URLs use forward slashes everywhere)."""
    if "://" in base:
        return posixpath.join(base, *parts)
    return os.path.join(base, *parts)


def is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def protocol(url: str) -> str:
    return url.split("://", 1)[0] if "://" in url else "file"


class Store:
    """A folder or object-store prefix (`url`) and how to reach it.

    Methods take full URLs (build them with `path`), so one Store also reads files it did not
    write under its own prefix, with the same options (a baseline run's files, a sweep's children).
    """

    def __init__(
        self, url: str, options: Mapping[str, Any] | None = None, credentials: Mapping[str, Any] | None = None
    ) -> None:
        self.url = url.strip().rstrip("/") or url
        public, secret = secrets.split(dict(options or {}))
        self.options: dict[str, Any] = public
        self._credentials: dict[str, Any] = secrets.merge(secret, dict(credentials or {}))

    # -- identity ------------------------------------------------------------------------------
    def __repr__(self) -> str:
        shown = f", credentials={secrets.MASK}" if self._credentials else ""
        return f"Store({self.url!r}, options={self.options!r}{shown})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Store) and (self.url, self.options) == (other.url, other.options)

    def __hash__(self) -> int:
        return hash(self.url)

    def __getstate__(self) -> dict[str, Any]:  # pickles (Prefect results, processes) carry no secret
        return {"url": self.url, "options": self.options, "_credentials": {}}

    @property
    def is_local(self) -> bool:
        return is_local(self.url)

    @property
    def local_path(self) -> str:
        """The store's folder on this machine (local stores only)."""
        if not self.is_local:
            raise StoreError(f"{self.url} is not a local folder")
        return self.url.removeprefix("file://")

    def at(self, url: str) -> Store:
        """Another location reached the same way (same options and credentials)."""
        other = Store(url, self.options)
        other._credentials = dict(self._credentials)
        return other

    def path(self, *parts: str) -> str:
        return join(self.url, *parts)

    # -- filesystem ----------------------------------------------------------------------------
    def fsspec_options(self, url: str | None = None) -> dict[str, Any]:
        """The options fsspec needs, credentials included: for filesystem calls, never for output."""
        opts = secrets.merge(self.options, self._credentials)
        if protocol(url or self.url) in ("s3", "s3a"):
            opts.setdefault("config_kwargs", S3_TIMEOUTS)
        return opts

    def filesystem(self, url: str | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
        """(filesystem, path) for `url` (default: the store's root)."""
        target = url or self.url
        url_to_fs = cast("Callable[..., tuple[fsspec.AbstractFileSystem, str]]", fsspec.core.url_to_fs)
        try:
            return url_to_fs(target, **(self.fsspec_options(target) if not is_local(target) else {}))
        except (ImportError, ValueError, TypeError) as exc:
            raise StoreError(f"cannot open {target!r}: {exc}; check the URL and the store's options") from exc

    def _typed(self, url: str) -> tuple[_FileSystem, str]:
        """`filesystem(url)`, its calls typed."""
        fs, path = self.filesystem(url)
        return cast(_FileSystem, fs), path

    # -- files ---------------------------------------------------------------------------------
    def write_bytes(self, url: str, data: bytes) -> str:
        """Write `data` to `url` atomically and return the URL."""
        fs, path = self._typed(url)
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
            # S3 objects get their content type, or static-website hosting and browsers download pages
            kwargs = {"ContentType": content_type(path)} if "s3" in _protocols(fs) else {}
            try:
                fs.pipe_file(path, data, **kwargs)
            except Exception as exc:  # s3fs raises a zoo of botocore/aiohttp errors
                raise StoreError(f"cannot write {url}: {type(exc).__name__}: {exc}") from exc
        return url

    def write_text(self, url: str, text: str) -> str:
        return self.write_bytes(url, text.encode("utf-8"))

    def read_bytes(self, url: str) -> bytes:
        fs, path = self._typed(url)
        return fs.cat_file(path)

    def read_text(self, url: str) -> str:
        return self.read_bytes(url).decode("utf-8")

    def open(self, url: str, mode: str = "rb", compression: str | None = "infer") -> fsspec.core.OpenFile:
        """An fsspec OpenFile (a context manager) for reading or streaming; writes go through write_*."""
        options = {} if is_local(url) else self.fsspec_options(url)
        open_file = cast("Callable[..., fsspec.core.OpenFile]", fsspec.open)  # one URL: one OpenFile
        try:
            return open_file(url, mode, compression=compression, **options)
        except (ImportError, ValueError, TypeError) as exc:
            raise StoreError(f"cannot open {url!r}: {exc}") from exc

    def exists(self, url: str) -> bool:
        fs, path = self._typed(url)
        return fs.exists(path)

    def copy(self, src: str, dst: str) -> str:
        """Copy a file within the store, atomically (batch files are small: read, then one write)."""
        fs, src_path = self._typed(src)
        if not isinstance(fs, LocalFileSystem):
            _, dst_path = self.filesystem(dst)
            fs.copy(src_path, dst_path)  # server-side copy: the object appears whole or not at all
            return dst
        return self.write_bytes(dst, fs.cat_file(src_path))

    def list(self, url: str, pattern: str = "*") -> list[str]:
        """Full URLs of the files matching `pattern` under `url`, sorted; [] when there is none."""
        fs, path = self._typed(url)
        try:
            found = fs.glob(posixpath.join(path.rstrip("/"), pattern))
        except FileNotFoundError:
            return []
        if is_local(url):
            return sorted(("file://" + p if url.startswith("file://") else p) for p in found)
        return sorted(fs.unstrip_protocol(p) for p in found)

    def remove(self, url: str) -> None:
        fs, path = self._typed(url)
        fs.rm_file(path)

    def check_writable(self, probe: bool = True) -> None:
        """Fail early, before any expensive step, if the store cannot be written. Without `probe`
        (a dry run) a local store is checked without creating anything: the nearest existing folder
        on its path must be a writable folder."""
        if not probe and self.is_local:
            path = Path(self.local_path)
            existing = next(p for p in (path, *path.parents) if p.exists())
            if not existing.is_dir():
                raise StoreError(f"the run store {self.url!r} is not writable: {existing} is a file; fix store.url")
            if not os.access(existing, os.W_OK | os.X_OK):
                raise StoreError(f"the run store {self.url!r} is not writable: no write permission on {existing}")
            return
        probe_url = self.path(f".evalflow-probe-{uuid.uuid4().hex}")
        try:
            self.write_bytes(probe_url, b"ok")
            self.remove(probe_url)
        except Exception as exc:
            raise StoreError(
                f"the run store {self.url!r} is not writable ({type(exc).__name__}: {' '.join(str(exc).split())}); "
                "check store.url, store.storage_options and the store's credentials (store.block)"
            ) from exc

    def register(self, con: Any, urls: list[str]) -> None:
        """Let a DuckDB connection read `urls` through this store's fsspec filesystems."""
        registered: set[str] = set()
        for url in urls:
            scheme = protocol(url)
            if is_local(url) or scheme in registered:
                continue
            fs, _ = self.filesystem(url)
            con.register_filesystem(fs)
            protocols = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
            registered.update(protocols)
            registered.add(scheme)
