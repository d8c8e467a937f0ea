"""The rollout record: one parquet row per rollout, the only input of every metric.

Nested values (messages, transcripts, sampling parameters, env info) are stored as JSON strings so
that every batch file has the same flat schema regardless of benchmark, and DuckDB can read all of
a run's files in one scan.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

SCHEMA_VERSION = 1

ROLLOUT_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("benchmark", pa.string(), nullable=False),
        pa.field("env_version", pa.string(), nullable=False),
        pa.field("batch_key", pa.string(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("repeat", pa.int32(), nullable=False),
        pa.field("seed", pa.int64(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("model_fingerprint", pa.string(), nullable=False),
        pa.field("sampling", pa.string(), nullable=False),  # JSON object
        pa.field("messages", pa.string(), nullable=False),  # JSON: chat messages (list) or a prompt (string)
        pa.field("completion", pa.string()),  # final assistant text; null on error
        pa.field("transcript", pa.string()),  # JSON list: the whole conversation incl. the completion
        pa.field("finish_reason", pa.string()),
        pa.field("prompt_tokens", pa.int64()),
        pa.field("completion_tokens", pa.int64()),
        pa.field("turns", pa.int32(), nullable=False),
        pa.field("tool_calls", pa.int32(), nullable=False),
        pa.field("latency_s", pa.float64()),
        pa.field("reward", pa.float64(), nullable=False),
        pa.field("success", pa.bool_(), nullable=False),
        pa.field("parsed_answer", pa.string()),
        pa.field("reference", pa.string()),
        pa.field("error", pa.string()),  # null when the rollout completed
        pa.field("info", pa.string(), nullable=False),  # JSON object, env-specific
        pa.field("created_at", pa.timestamp("ms", tz="UTC"), nullable=False),
    ]
)

JSON_COLUMNS = ("sampling", "messages", "transcript", "info")


def to_json(value: Any) -> str:
    """Deterministic JSON for the nested columns (sorted keys keep files byte-stable)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def to_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Build a batch table, encoding nested columns and enforcing the schema."""
    encoded = []
    for row in rows:
        row = dict(row)
        for col in JSON_COLUMNS:
            value = row.get(col)
            if value is not None and not isinstance(value, str):
                row[col] = to_json(value)
        encoded.append(row)
    return pa.Table.from_pylist(encoded, schema=ROLLOUT_SCHEMA)
