"""The record and metrics contracts: one declaration of the rollout row, versioned files and documents."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pydantic
import pytest

from core.metrics_doc import METRICS_SCHEMA_VERSION, RunMetrics
from core.schema import (
    COLUMN_DOCS,
    JSON_COLUMNS,
    ROLLOUT_SCHEMA,
    ROLLOUT_SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    RolloutRecord,
    SchemaVersionError,
    check_schema_version,
    to_json,
    to_parquet_bytes,
    to_table,
)


def record(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "run_id": "r",
        "benchmark": "b",
        "env_version": "1",
        "batch_key": "k",
        "prompt_id": "p0",
        "repeat": 0,
        "seed": 7,
        "model": "m",
        "model_fingerprint": "fp",
        "sampling": {"temperature": 0.7},
        "messages": [{"role": "user", "content": "1+1?"}],
        "turns": 1,
        "tool_calls": 0,
        "reward": 1.0,
        "success": True,
        "info": {"é": [1, 2]},
        "created_at": datetime(2025, 1, 1, tzinfo=UTC),
    }
    row.update(overrides)
    return row


def test_the_arrow_schema_follows_the_model() -> None:
    assert ROLLOUT_SCHEMA.names == list(RolloutRecord.model_fields)
    assert JSON_COLUMNS == ("sampling", "messages", "transcript", "info")
    assert set(COLUMN_DOCS) == set(ROLLOUT_SCHEMA.names) and all(COLUMN_DOCS.values())
    types = {f.name: (f.type, f.nullable) for f in ROLLOUT_SCHEMA}
    assert types["repeat"] == (pa.int32(), False) and types["seed"] == (pa.int64(), False)
    assert types["completion"] == (pa.string(), True) and types["info"] == (pa.string(), False)
    assert types["latency_s"] == (pa.float64(), True) and types["success"] == (pa.bool_(), False)
    assert types["created_at"] == (pa.timestamp("ms", tz="UTC"), False)
    for name, info in RolloutRecord.model_fields.items():  # nullable columns are exactly the optional fields
        assert ROLLOUT_SCHEMA.field(name).nullable == (not info.is_required()), name


def test_to_table_encodes_json_columns_and_records_the_version() -> None:
    table = to_table([record(), RolloutRecord.model_validate(record(prompt_id="p1", messages=to_json("plain")))])
    assert table.schema.metadata[SCHEMA_VERSION_KEY] == str(ROLLOUT_SCHEMA_VERSION).encode()
    rows = table.to_pylist()
    assert rows[0]["info"] == '{"é": [1, 2]}' and rows[0]["sampling"] == '{"temperature": 0.7}'
    assert rows[1]["messages"] == '"plain"'  # a pre-encoded JSON string is kept as it was
    assert rows[0]["completion"] is None and rows[0]["transcript"] is None


def test_a_stored_row_reads_back_as_the_same_record() -> None:
    first = RolloutRecord.model_validate(record(transcript=[{"role": "assistant", "content": "2"}]))
    (stored,) = pq.read_table(io.BytesIO(to_parquet_bytes([first]))).to_pylist()
    assert RolloutRecord.model_validate(stored) == first


def test_records_are_checked_before_anything_is_written() -> None:
    with pytest.raises(pydantic.ValidationError, match="reward"):
        to_table([record(reward="high")])
    with pytest.raises(pydantic.ValidationError, match="unknown_column"):
        to_table([record(unknown_column=1)])
    with pytest.raises(pydantic.ValidationError, match="info"):
        to_table([record(info="{not json")])


def test_parquet_bytes_carry_the_version() -> None:
    metadata = pq.read_metadata(io.BytesIO(to_parquet_bytes([record()]))).metadata
    assert metadata[SCHEMA_VERSION_KEY] == str(ROLLOUT_SCHEMA_VERSION).encode()


def test_check_schema_version() -> None:
    assert check_schema_version("a.parquet", None) == 1
    assert check_schema_version("a.parquet", b"2") == 2
    assert check_schema_version("a.parquet", b"3") == 3
    with pytest.raises(SchemaVersionError, match=r"^s3://b/x\.parquet: rollout schema version 4 is not supported"):
        check_schema_version("s3://b/x.parquet", b"4")
    with pytest.raises(SchemaVersionError, match="unreadable rollout schema version 'two'"):
        check_schema_version("a.parquet", "two")


V2_DOCUMENT: dict[str, Any] = {
    "schema_version": 2,
    "total_rollouts": 4,
    "duplicate_rollouts": 0,
    "benchmarks": {
        "gsm8k": {
            "n_prompts": 2,
            "n_rollouts": 4,
            "successes": 2,
            "repeats": {"min": 2, "max": 2},
            "accuracy": 0.5,
            "mean_reward": 0.5,
            "pass_at_k": {"1": 0.5, "2": 0.5},
            "ci": {
                "level": 0.95,
                "accuracy": {"low": 0.15, "high": 0.85, "n": 4, "method": "wilson"},
                "info_rates": {"strict_correct": {"low": 0.01, "high": 0.8, "n": 4, "method": "wilson"}},
                "mean_reward": {"low": 0.0, "high": 1.0, "n": 2, "method": "bootstrap-prompts", "resamples": 2000},
            },
            "prompt_outcomes": {"never_succeed": {"count": 1, "ids": ["p1"]}, "mixed": {"count": 0}},
            "info_rates": {"strict_correct": 0.25},
            "info_outcomes": {"outcome": {"pass": 3, "fail": 1}},
        }
    },
}


def test_a_schema_2_document_validates_with_its_info_rates_as_env_metrics() -> None:
    metrics = RunMetrics.model_validate(V2_DOCUMENT)
    bm = metrics.benchmarks["gsm8k"]
    assert metrics.schema_version == 2 and bm.accuracy == 0.5 and bm.ci.mean_reward.resamples == 2000
    strict = bm.env_metric("strict_correct")
    assert strict is not None and (strict.kind, strict.value, strict.n) == ("rate", 0.25, 4)
    assert strict.ci is not None and strict.ci.high == 0.8
    outcome = bm.env_metric("outcome")
    assert outcome is not None and outcome.counts == {"pass": 3, "fail": 1} and outcome.n == 4
    assert "info_rates" not in bm.model_dump()


def test_a_newer_metrics_document_is_refused() -> None:
    assert RunMetrics().schema_version == METRICS_SCHEMA_VERSION == 7
    with pytest.raises(pydantic.ValidationError, match="newer than this evalflow reads"):
        RunMetrics.model_validate({"schema_version": METRICS_SCHEMA_VERSION + 1})


def test_the_in_flight_rollout_row_declares_exactly_the_record_fields() -> None:
    """RolloutRow (collection's plain-dict row) and RolloutRecord (what a batch file holds) cannot drift apart."""
    import typing

    from core.rollout_row import RolloutRow
    from core.schema import RolloutRecord

    assert list(typing.get_type_hints(RolloutRow)) == list(RolloutRecord.model_fields)
