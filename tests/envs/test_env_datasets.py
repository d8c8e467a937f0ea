"""Dataset loading: JSONL/parquet through fsspec, errors that name file and line, and rows_hash."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from envs.base import DatasetError
from envs.datasets import load_rows, rows_hash
from envs.gsm8k import GSM8KEnv

ROWS = [
    {"id": "gsm-0000", "question": "What is 2 + 3?", "answer": "5"},
    {"id": "gsm-0001", "question": "What is 4 * 5?", "answer": "20"},
    {"id": "gsm-0002", "question": "What is 9 - 10?", "answer": "-1"},
]


def write_jsonl(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.fixture
def env() -> GSM8KEnv:
    return GSM8KEnv()


def test_loads_jsonl(tmp_path: Path, env: GSM8KEnv) -> None:
    url = write_jsonl(tmp_path / "d.jsonl", [json.dumps(r) for r in ROWS])
    assert load_rows(url, env) == ROWS
    assert load_rows(url, env, limit=2) == ROWS[:2]
    assert load_rows(f"file://{url}", env) == ROWS


def test_blank_lines_are_skipped_but_counted(tmp_path: Path, env: GSM8KEnv) -> None:
    url = write_jsonl(tmp_path / "d.jsonl", [json.dumps(ROWS[0]), "", "{not json"])
    with pytest.raises(DatasetError, match=r"d\.jsonl:3: not valid JSON"):
        load_rows(url, env)


def test_bad_json_line(tmp_path: Path, env: GSM8KEnv) -> None:
    lines = [json.dumps(r) for r in ROWS]
    lines[1] = lines[1][:-1]
    url = write_jsonl(tmp_path / "d.jsonl", lines)
    with pytest.raises(DatasetError, match=rf"^{url}:2: not valid JSON"):
        load_rows(url, env)


def test_line_that_is_not_an_object(tmp_path: Path, env: GSM8KEnv) -> None:
    url = write_jsonl(tmp_path / "d.jsonl", [json.dumps(ROWS[0]), "[1, 2]"])
    with pytest.raises(DatasetError, match=rf"^{url}:2: expected a JSON object, got list"):
        load_rows(url, env)


def test_missing_field(tmp_path: Path, env: GSM8KEnv) -> None:
    rows = [dict(r) for r in ROWS]
    del rows[2]["answer"]
    url = write_jsonl(tmp_path / "d.jsonl", [json.dumps(r) for r in rows])
    with pytest.raises(DatasetError, match=rf"^{url}:3: missing 'answer'"):
        load_rows(url, env)


def test_every_row_is_validated_even_past_the_limit(tmp_path: Path, env: GSM8KEnv) -> None:
    rows = [*ROWS, {"id": "bad", "question": "?"}]
    url = write_jsonl(tmp_path / "d.jsonl", [json.dumps(r) for r in rows])
    with pytest.raises(DatasetError, match=r":4: "):
        load_rows(url, env, limit=1)


def test_duplicate_id(tmp_path: Path, env: GSM8KEnv) -> None:
    rows = [*ROWS, {**ROWS[1], "question": "Other?"}]
    url = write_jsonl(tmp_path / "d.jsonl", [json.dumps(r) for r in rows])
    with pytest.raises(DatasetError, match=rf"^{url}:4: duplicate prompt id 'gsm-0001' \(first on line 2\)"):
        load_rows(url, env)


def test_missing_file(tmp_path: Path, env: GSM8KEnv) -> None:
    url = str(tmp_path / "nope" / "test.jsonl")
    with pytest.raises(DatasetError, match=rf"^{url}: dataset file not found; provide"):
        load_rows(url, env)


def test_empty_file(tmp_path: Path, env: GSM8KEnv) -> None:
    url = write_jsonl(tmp_path / "d.jsonl", [])
    with pytest.raises(DatasetError, match="no rows"):
        load_rows(url, env)


def test_not_utf8(tmp_path: Path, env: GSM8KEnv) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(json.dumps(ROWS[0]).encode() + b"\n\xff\xfe\n")
    with pytest.raises(DatasetError, match=r":2: not valid UTF-8"):
        load_rows(str(path), env)


def test_gzipped_jsonl(tmp_path: Path, env: GSM8KEnv) -> None:
    path = tmp_path / "d.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in ROWS).encode()))
    assert load_rows(str(path), env) == ROWS


def test_parquet(tmp_path: Path, env: GSM8KEnv) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    assert load_rows(str(path), env) == ROWS


def test_parquet_errors_name_the_row(tmp_path: Path, env: GSM8KEnv) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([*ROWS, {**ROWS[0], "id": "x", "answer": "n/a"}]), path)
    with pytest.raises(DatasetError, match=r"d\.parquet:4: 'answer'"):
        load_rows(str(path), env)


def test_corrupt_parquet(tmp_path: Path, env: GSM8KEnv) -> None:
    path = tmp_path / "d.parquet"
    path.write_bytes(b"definitely not parquet")
    with pytest.raises(DatasetError, match="not a readable parquet file"):
        load_rows(str(path), env)


def test_memory_filesystem_through_an_opener(env: GSM8KEnv) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/evalflow-test/d.jsonl.gz", gzip.compress("".join(json.dumps(r) + "\n" for r in ROWS).encode()))
    opened: list[str] = []

    def opener(url: str) -> Any:
        opened.append(url)
        return fsspec.open(url, "rb", compression="infer")

    try:
        assert load_rows("memory://evalflow-test/d.jsonl.gz", env) == ROWS
        assert load_rows("memory://evalflow-test/d.jsonl.gz", env, opener=opener) == ROWS
    finally:
        fs.rm("/evalflow-test", recursive=True)
    assert opened == ["memory://evalflow-test/d.jsonl.gz"]


def test_rows_hash_is_stable_and_sensitive() -> None:
    h = rows_hash(ROWS)
    assert len(h) == 64
    assert h == rows_hash([dict(reversed(list(r.items()))) for r in ROWS])  # key order does not matter
    # Pinned: a change here silently invalidates every cached rollout.
    assert h == "b1095f8071bd9adcf52e8f9522ec5b73117dc3b794c0a8245ddb8da9a31f9f44"
    assert h != rows_hash(ROWS[:2])
    assert h != rows_hash(list(reversed(ROWS)))  # row order does
    changed = [dict(r) for r in ROWS]
    changed[1]["answer"] = "21"
    assert h != rows_hash(changed)


def test_rows_hash_handles_parquet_types() -> None:
    import datetime as dt

    a = rows_hash([{"t": dt.date(2024, 1, 2), "b": b"\x00"}])
    assert a == rows_hash([{"t": dt.date(2024, 1, 2), "b": b"\x00"}])
    assert a != rows_hash([{"t": dt.date(2024, 1, 3), "b": b"\x00"}])
    with pytest.raises(TypeError):
        rows_hash([{"x": object()}])


def test_rows_hash_of_plain_rows_is_the_canonical_json_hash() -> None:
    """Batch keys hash rows with rows_hash now: for JSON rows it is the hash they had, so caches stay valid."""
    import hashlib

    from envs.base import canonical_json

    rows = [*ROWS, {"id": "x", "question": "Ünïcode ✓?", "answer": "1", "extra": [1.5, None, {"b": 1, "a": 2}]}]
    assert rows_hash(rows) == hashlib.sha256(canonical_json(rows).encode()).hexdigest()


def test_parquet_typed_columns_load_and_hash_stably(tmp_path: Path, env: GSM8KEnv) -> None:
    import datetime as dt
    import uuid
    from decimal import Decimal

    columns = {
        "id": ["a"],
        "question": ["1 + 1?"],
        "answer": ["2"],
        "day": [dt.date(2024, 1, 2)],
        "at_ns": pa.array([1_700_000_000_123_456_789], pa.timestamp("ns")),
        "at_tz": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC)], pa.timestamp("us", tz="Europe/Paris")),
        "clock": [dt.time(12, 30)],
        "took": pa.array([1_234_567_891], pa.duration("ns")),
        "blob": [b"\x00\xff"],
        "price": pa.array([Decimal("1.50")], pa.decimal128(5, 2)),
        "uid": pa.array([uuid.UUID(int=7).bytes], pa.uuid()),
        "tags": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())),
    }

    def load(name: str, **changes: Any) -> str:
        pq.write_table(pa.table({**columns, **changes}), tmp_path / name)
        return rows_hash(load_rows(str(tmp_path / name), env))

    first = load("a.parquet")
    assert load("b.parquet") == first
    assert load("c.parquet", at_ns=pa.array([1_700_000_000_123_456_788], pa.timestamp("ns"))) != first  # 1 ns
    assert load("d.parquet", took=pa.array([1_234_567_892], pa.duration("ns"))) != first
    assert load("e.parquet", blob=[b"\x00\xfe"]) != first
    assert load("f.parquet", uid=pa.array([uuid.UUID(int=8).bytes], pa.uuid())) != first
