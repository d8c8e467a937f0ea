"""Planning a parquet dataset whose extra columns are dates, bytes, times and decimals: stable content keys."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from prefect.filesystems import LocalFileSystem

from core.config import BenchmarkConfig, EvalConfig
from core.store import Store
from envs.datasets import rows_hash
from envs.gsm8k import GSM8KEnv
from tasks.collection.plan import batch_key, load_benchmarks, plan

COLUMNS: dict[str, Any] = {
    "id": ["a", "b", "c"],
    "question": ["1 + 1?", "2 + 2?", "3 + 3?"],
    "answer": ["2", "4", "6"],
    "day": [dt.date(2024, 1, 2), dt.date(2024, 1, 3), dt.date(2024, 1, 4)],
    "blob": [b"\x00\x01", b"\xff", b""],
    "at": [dt.datetime(2024, 1, 2, 3, 4, 5), None, dt.datetime(2024, 1, 4)],
    "clock": [dt.time(12, 30), dt.time(0, 0), dt.time(23, 59, 59)],
    "price": pa.array([Decimal("1.50"), Decimal("2.00"), None], pa.decimal128(5, 2)),
}


def write(path: Path, **changes: list[Any]) -> str:
    pq.write_table(pa.table({**COLUMNS, **changes}), path)
    return str(path)


def keys(path: str, tmp_path: Path) -> list[str]:
    """Load the dataset as a run does, plan it against an empty cache; the batch keys (one prompt per batch)."""
    config = EvalConfig(
        benchmarks=[BenchmarkConfig(name="gsm8k", dataset=path, repeats=2)],
        collection={"batch_size": 2},
    )
    benchmarks = load_benchmarks(config, Store(str(tmp_path / "store")))
    storage = LocalFileSystem(basepath=str(tmp_path / "results"))
    planned = plan(benchmarks, config, "model-fp", storage, Store(str(tmp_path / "store")))
    assert all(p.cached is None and not p.stale for p in planned)
    first = planned[0].batch.rows[0]  # the values reach the batches as parquet gave them
    assert isinstance(first["day"], dt.date) and isinstance(first["blob"], bytes)
    return [p.batch.key for p in planned]


def test_parquet_with_date_and_bytes_columns_plans_with_stable_keys(tmp_path: Path) -> None:
    first = keys(write(tmp_path / "d.parquet"), tmp_path)
    assert len(first) == 3 and len(set(first)) == 3
    assert keys(write(tmp_path / "again.parquet"), tmp_path) == first  # a second load, another file
    changed_day = keys(write(tmp_path / "day.parquet", day=[dt.date(2024, 1, 2), dt.date(2025, 1, 3), None]), tmp_path)
    assert changed_day[0] == first[0] and changed_day[1] != first[1] and changed_day[2] != first[2]
    changed_blob = keys(write(tmp_path / "blob.parquet", blob=[b"\x00\x02", b"\xff", b""]), tmp_path)
    assert changed_blob[0] != first[0] and changed_blob[1:] == first[1:]
    changed_price = keys(write(tmp_path / "price.parquet", price=pa.array([None] * 3, pa.decimal128(5, 2))), tmp_path)
    assert changed_price[:2] != first[:2] and changed_price[2] == first[2]


def test_batch_key_hashes_rows_with_rows_hash() -> None:
    env, rows = GSM8KEnv(), [{"id": "a", "question": "q", "answer": "1", "day": dt.date(2024, 1, 2)}]
    key = batch_key(env, rows, [0], "fp", EvalConfig().sampling)
    assert key == batch_key(env, [dict(rows[0])], [0], "fp", EvalConfig().sampling)
    # a date is not its ISO string, and bytes are not their hex: tagged encodings keep them apart
    as_text = [{**rows[0], "day": "2024-01-02"}]
    assert rows_hash(as_text) != rows_hash(rows)
    assert key != batch_key(env, as_text, [0], "fp", EvalConfig().sampling)
