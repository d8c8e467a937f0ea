"""Load benchmark rows from JSONL or parquet on any fsspec URL, validated up front.

Every row is checked before anything is sent to a server, so a typo on line 4,000 costs seconds,
not the hours of rollouts before it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from envs.base import DatasetError, Env

PARQUET_SUFFIXES = (".parquet", ".pq")


def _is_parquet(url: str) -> bool:
    return url.split("?", 1)[0].lower().endswith(PARQUET_SUFFIXES)


def _jsonl_rows(url: str, f: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, row) for each non-blank line; malformed lines raise DatasetError."""
    for lineno, raw in enumerate(f, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DatasetError(f"{url}:{lineno}: not valid UTF-8 ({e.reason})") from e
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{url}:{lineno}: not valid JSON ({e.msg} at column {e.colno})") from e
        if not isinstance(row, dict):
            raise DatasetError(f"{url}:{lineno}: expected a JSON object, got {type(row).__name__}")
        yield lineno, row


def _parquet_rows(url: str, f: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based row number, row); for parquet the row number plays the role of the line number."""
    try:
        table = pq.read_table(f)
    except (pa.ArrowException, OSError) as e:
        raise DatasetError(f"{url}: not a readable parquet file ({e})") from e
    yield from enumerate(table.to_pylist(), start=1)


def load_rows(
    url: str,
    env: Env,
    storage_options: dict[str, Any] | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """All rows of a dataset (then the first `limit`), each validated by the env; ids must be unique.

    JSONL (optionally compressed, by suffix) or parquet, from a local path or any fsspec URL.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    rows: list[dict[str, Any]] = []
    first_seen: dict[str, int] = {}
    try:
        with fsspec.open(url, "rb", compression="infer", **(storage_options or {})) as f:
            numbered = _parquet_rows(url, f) if _is_parquet(url) else _jsonl_rows(url, f)
            for lineno, row in numbered:
                where = f"{url}:{lineno}"
                env.validate_row(row, where)
                pid = env.prompt_id(row)
                if pid in first_seen:
                    raise DatasetError(f"{where}: duplicate prompt id {pid!r} (first on line {first_seen[pid]})")
                first_seen[pid] = lineno
                rows.append(row)
    except FileNotFoundError as e:
        raise DatasetError(
            f"{url}: dataset file not found; provide a JSONL or parquet file of {env.name!r} rows "
            f"at this path (or point the config at another one)"
        ) from e
    if not rows:
        raise DatasetError(f"{url}: the dataset has no rows")
    return rows if limit is None else rows[:limit]


def _json_default(obj: Any) -> Any:
    """Stable encodings for the non-JSON values parquet can produce."""
    if isinstance(obj, bytes):
        return {"__bytes__": obj.hex()}
    if isinstance(obj, dt.date | dt.datetime | dt.time):
        return {"__datetime__": obj.isoformat()}
    if isinstance(obj, Decimal):
        return {"__decimal__": str(obj)}
    raise TypeError(f"cannot hash a value of type {type(obj).__name__} in a dataset row")


def rows_hash(rows: list[dict[str, Any]]) -> str:
    """sha256 hex of the rows' canonical JSON (sorted keys): the dataset part of rollout cache keys."""
    text = json.dumps(rows, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default)
    return hashlib.sha256(text.encode()).hexdigest()
