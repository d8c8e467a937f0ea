"""Reading a run's files: schema versions, fsspec URLs, unreadable files, for the metrics (tasks/analysis/load.py)
and for the rollout browser's per-rollout rows (tasks/reporting/browser_sample.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.schema import ROLLOUT_SCHEMA, ROLLOUT_SCHEMA_VERSION, SCHEMA_VERSION_KEY, SchemaVersionError, to_table
from core.store import Store, StoreError
from tasks.analysis.metrics import compute_metrics
from tasks.reporting.browser_sample import sample_rollouts


def outcomes(make_rollout, prompt_id: str, successes: list[bool]) -> list[dict]:
    return [make_rollout(prompt_id=prompt_id, repeat=i, success=ok, reward=float(ok)) for i, ok in enumerate(successes)]


def test_every_batch_file_carries_the_schema_version(make_rollout, write_batch) -> None:
    path = write_batch([make_rollout()])
    assert pq.read_metadata(path).metadata[SCHEMA_VERSION_KEY] == str(ROLLOUT_SCHEMA_VERSION).encode()
    assert ROLLOUT_SCHEMA_VERSION == 3


def test_a_version_1_file_without_metadata_still_analyses(make_rollout, tmp_path: Path, local_store) -> None:
    path = tmp_path / "v1.parquet"
    table = to_table(outcomes(make_rollout, "p", [True, False]))
    pq.write_table(table.replace_schema_metadata(None), path)
    assert SCHEMA_VERSION_KEY not in (pq.read_metadata(path).metadata or {})
    metrics = compute_metrics([str(path)], local_store)
    assert metrics.benchmarks["gsm8k"].accuracy == 0.5
    sample = sample_rollouts([str(path)], local_store, ["repeat", "success"], n=10).sort("repeat")
    assert sample["success"].to_list() == [True, False]


def test_a_file_of_a_newer_schema_is_refused_naming_it(make_rollout, write_batch, tmp_path: Path, local_store) -> None:
    newer = tmp_path / "from-the-future.parquet"
    table = to_table([make_rollout()])
    pq.write_table(table.replace_schema_metadata({SCHEMA_VERSION_KEY: b"4"}), newer)
    files = [write_batch([make_rollout(prompt_id="ok")]), str(newer)]
    message = rf"{newer}: rollout schema version 4 is not supported \(this evalflow reads 1 to 3\)"
    with pytest.raises(SchemaVersionError, match=message):
        compute_metrics(files, local_store)
    with pytest.raises(SchemaVersionError, match=message):
        sample_rollouts(files, local_store, ["success"], n=10)


def test_fsspec_urls_are_read_through_the_store(make_rollout) -> None:
    """Non-local URLs (s3:// in production) go through fsspec; memory:// stands in without a network."""
    store = Store("memory://evalflow-test-analysis")
    url = store.path("run", "batch-0.parquet")
    buffer = pa.BufferOutputStream()
    pq.write_table(to_table(outcomes(make_rollout, "m", [True, False, False, False])), buffer)
    store.write_bytes(url, buffer.getvalue().to_pybytes())
    try:
        metrics = compute_metrics([url], store)
        frame = sample_rollouts([url], store, ["prompt_id", "repeat", "success"], n=10).sort("repeat")
    finally:
        fsspec.filesystem("memory").rm("/evalflow-test-analysis", recursive=True)
    assert metrics.benchmarks["gsm8k"].pass_at_k["2"] == pytest.approx(0.5)
    assert frame["success"].to_list() == [True, False, False, False]


def test_unreadable_files_raise_a_store_error_naming_them(tmp_path: Path, local_store) -> None:
    missing = str(tmp_path / "nope.parquet")
    with pytest.raises(StoreError, match=r"nope\.parquet"):
        compute_metrics([missing], local_store)
    with pytest.raises(StoreError, match=r"nope\.parquet"):
        sample_rollouts([missing], local_store, ["success"], n=10)


# ---------------------------------------------------------------------------------------------
# the rollout browser's per-rollout rows


def test_browser_rows_hold_the_asked_columns(make_rollout, write_batch, local_store) -> None:
    rows = [make_rollout(prompt_id="b", repeat=1), make_rollout(prompt_id="a"), make_rollout(prompt_id="b")]
    files = [write_batch(rows)]
    frame = sample_rollouts(files, local_store, ["prompt_id", "repeat", "completion"], n=10)
    assert frame.columns == ["prompt_id", "repeat", "completion", "pick"]
    assert sorted(zip(frame["prompt_id"], frame["repeat"], strict=True)) == [("a", 0), ("b", 0), ("b", 1)]
    assert frame["pick"].to_list() == [1, 2, 3]  # priority order
    assert sample_rollouts(files, local_store, ROLLOUT_SCHEMA.names, n=10).width == len(ROLLOUT_SCHEMA) + 1 == 31
    assert sample_rollouts([], local_store, ["reward"], n=10).columns == ["reward", "pick"]


def test_browser_rows_cap_each_benchmark_and_drop_stale_copies(make_rollout, write_batch, local_store) -> None:
    rows = [make_rollout(prompt_id=f"p{i}", repeat=r) for i in range(5) for r in range(3)]
    rows += [make_rollout(benchmark="tetris", prompt_id=f"g{i}", repeat=0) for i in range(4)]
    stale = [make_rollout(prompt_id="p0", repeat=0, completion="old", created_at=datetime(2024, 1, 1, tzinfo=UTC))]
    files = [write_batch(rows), write_batch(stale)]
    columns = ["benchmark", "prompt_id", "repeat", "completion"]
    frame = sample_rollouts(files, local_store, columns, n=4)
    assert frame.filter(frame["benchmark"] == "gsm8k").height == 4
    assert frame.filter(frame["benchmark"] == "tetris").height == 4
    everything = sample_rollouts(files, local_store, columns, n=100)
    assert everything.height == 19  # 15 + 4, the stale copy dropped
    assert "old" not in everything["completion"].to_list()
    assert compute_metrics(files, local_store).duplicate_rollouts == 1
