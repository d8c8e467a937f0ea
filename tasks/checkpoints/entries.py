"""Cache entries: one folder per converted or downloaded checkpoint, either complete or absent.

An entry is `<root>/<readable>_<key>/` and counts only when its marker file is inside. It is built
in a temporary dot-named sibling, the marker is written last, and the folder is moved into place
with `os.replace`; a crash leaves only a dot-named temporary folder, which no lookup takes for an
entry and the next builder removes. One file lock per entry makes concurrent builders (threads,
processes, workers sharing the cache) build once: the others wait, then use the result. The lock
is a kernel `flock`, released when its holder dies, so a killed builder never blocks the next one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from filelock import FileLock, Timeout
from pydantic import BaseModel

from core.logs import get_logger

WAIT_NOTE_S = 10.0  # how often a waiting process says it still waits (the progress cadence)

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class MarkerFile(Generic[M]):
    """An entry's marker: its file name, and how its text is read back."""

    name: str
    parse: Callable[[str], M]


@dataclass(frozen=True)
class Built(Generic[M]):
    path: Path
    info: M  # the marker
    built: bool  # False: it was already there (a cache hit)


def find(root: Path, key: str, marker: str) -> Path | None:
    """The complete entry for `key` under any readable name (content-addressed lookup)."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return None
    for name in sorted(names):
        if name.endswith(f"_{key}") and not name.startswith(".") and (root / name / marker).is_file():
            return root / name
    return None


def read_marker(folder: Path, marker: MarkerFile[M]) -> M:
    """The marker of `folder`; pydantic's ValidationError if it does not parse as `marker` says."""
    return marker.parse((folder / marker.name).read_text())


def write_marker(folder: Path, name: str, info: BaseModel) -> None:
    tmp = folder / f".{name}.tmp"
    with tmp.open("w") as fh:
        json.dump(info.model_dump(mode="json"), fh, indent=2, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, folder / name)


def temp_folders(target: Path) -> list[Path]:
    return sorted(target.parent.glob(f".{target.name}.tmp-*"))


@contextlib.contextmanager
def locked(lock_path: Path, what: str) -> Iterator[None]:
    """Hold the entry's lock; if another process holds it, say so and wait for it."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        logger = get_logger()
        logger.info("another process is preparing %s; waiting for it (lock %s)", what, lock_path)
        started = time.monotonic()
        while True:
            try:
                lock.acquire(timeout=WAIT_NOTE_S)
                break
            except Timeout:
                logger.info("still waiting for %s (%.0f s)", what, time.monotonic() - started)
        logger.info("the other process finished %s after %.1f s", what, time.monotonic() - started)
    try:
        yield
    finally:
        lock.release()


def build(target: Path, marker: MarkerFile[M], produce: Callable[[Path], M]) -> M:
    """Run `produce(tmp)`, write the marker last, move the folder into place. Call under the lock."""
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in temp_folders(target):  # left by a builder that died (we hold the lock: none is alive)
        shutil.rmtree(stale, ignore_errors=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    tmp.mkdir()
    try:
        info = produce(tmp)
        write_marker(tmp, marker.name, info)
        if target.exists():  # forced, replaced, or a leftover without a marker
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info


def ensure(
    target: Path,
    lock_path: Path,
    marker: MarkerFile[M],
    produce: Callable[[Path], M],
    what: str,
    existing: Callable[[], Path | None],
    force: bool = False,
) -> Built[M]:
    """The entry `existing()` finds, or a new one built at `target`; `force` rebuilds it."""
    if not force and (found := existing()) is not None:
        return Built(found, read_marker(found, marker), False)
    with locked(lock_path, what):
        found = existing()
        if found is not None and not force:
            get_logger().info("%s is ready (built by another process meanwhile): %s", what, found)
            return Built(found, read_marker(found, marker), False)
        if found is not None and found != target:
            shutil.rmtree(found)
        return Built(target, build(target, marker, produce), True)
