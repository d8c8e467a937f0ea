"""Content hashes of checkpoint files, memoised so an unchanged multi-GB checkpoint is not re-read.

The memo is a small JSON file next to the cache, keyed by absolute path and stamped with
(size, mtime_ns, inode): a second request in a new process costs one `stat` per file. A file
rewritten in place gets a new mtime, a file replaced by rename a new inode, so either is hashed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import uuid
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from filelock import FileLock
from pydantic import JsonValue

MARKER = "evalflow-model.json"
MEMO_NAME = ".sha256-memo.json"
CHUNK = 8 << 20


def _digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@lru_cache(maxsize=4096)
def _sha256_cached(path: str, size: int, mtime_ns: int, inode: int) -> str:
    return _digest(path)


class HashMemo:
    """sha256 per file, remembered in `<root>/.sha256-memo.json` across processes."""

    def __init__(self, root: Path | None) -> None:
        self.path = root / MEMO_NAME if root else None
        self._files: dict[str, list[Any]] = {}
        self._validated: set[str] = set()
        self._dirty = False
        self._seen_mtime: int | None = None
        self._lock = threading.RLock()  # Prefect may run tasks in threads that share this memo

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return
        if mtime == self._seen_mtime:
            return
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return  # a memo that does not parse is only a lost optimisation
        self._seen_mtime = mtime
        self._files = {**data.get("files", {}), **self._files}
        self._validated |= set(data.get("validated", []))

    def sha256(self, file: Path) -> str:
        path = os.path.abspath(file)
        st = os.stat(path)
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        with self._lock:
            self._load()
            known = self._files.get(path)
        if known and known[:3] == stamp:
            return known[3]
        digest = _sha256_cached(path, *stamp)
        with self._lock:
            self._files[path] = [*stamp, digest]
            self._dirty = True
        return digest

    def is_validated(self, fingerprint: str) -> bool:
        with self._lock:
            self._load()
            return fingerprint in self._validated

    def mark_validated(self, fingerprint: str) -> None:
        with self._lock:
            self._validated.add(fingerprint)
            self._dirty = True

    def flush(self) -> None:
        """Merge what this process learned into the memo file (atomically, under a lock)."""
        if self.path is None or not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, FileLock(str(self.path) + ".lock"):
            self._seen_mtime = None
            self._load()
            files = (
                {p: v for p, v in self._files.items() if os.path.exists(p)} if len(self._files) > 5000 else self._files
            )
            tmp = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex[:8]}.tmp")
            try:
                tmp.write_text(json.dumps({"files": files, "validated": sorted(self._validated)}))
                os.replace(tmp, self.path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
        self._dirty = False


@lru_cache(maxsize=16)
def memo_for(root: Path) -> HashMemo:
    return HashMemo(root)


def sha256_file(path: Path, memo: HashMemo | None = None) -> str:
    """Content hash of one file (memoised per path, size, mtime and inode)."""
    if memo is not None:
        return memo.sha256(path)
    st = os.stat(path)
    return _sha256_cached(os.path.abspath(path), st.st_size, st.st_mtime_ns, st.st_ino)


def served_files(folder: Path) -> list[Path]:
    """The files vLLM reads from a folder: evalflow's marker and dot-files excluded."""
    files = []
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = file.relative_to(folder).as_posix()
        if rel != MARKER and not rel.startswith("."):
            files.append(file)
    return files


def folder_fingerprint(folder: Path, memo: HashMemo | None = None) -> str:
    """Hash of every served file's name and content: the model's identity in rollout cache keys."""
    digest = hashlib.sha256()
    for file in served_files(folder):
        rel = file.relative_to(folder).as_posix()
        digest.update(rel.encode() + b"\0" + sha256_file(file, memo).encode() + b"\n")
    return digest.hexdigest()


def key_of(parts: Mapping[str, JsonValue]) -> str:
    """A short stable hash of a JSON-able description (the cache entry's key)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
