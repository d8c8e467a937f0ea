"""The run's rollout contract: the rollout record (a parquet row); metrics.json's models are in core/metrics_doc.py.

Every metric is computed from the rollout records, one parquet row per rollout, and nothing else.

`RolloutRecord` is the one declaration of the row: the Arrow schema of the batch files is derived from
its fields, so the two cannot drift. Nested values (messages, transcripts, sampling parameters, env
info) are stored as JSON text so that every batch file has the same flat schema regardless of
benchmark, and DuckDB can read all of a run's files in one scan. Every file carries its schema version
in its key-value metadata; `check_schema_version` is the one place that decides whether a file can be read.
"""

from __future__ import annotations

import io
import json
import types
import typing
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Annotated, Any, cast

import pyarrow.parquet  # pyright: ignore[reportMissingTypeStubs]  # pyarrow ships no type stubs
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.fields import FieldInfo

from errors import EvalflowError

pa, pq = cast(Any, pyarrow), cast(Any, pyarrow.parquet)  # pyarrow has no type stubs: its objects are Any here

# Version 1: the files written before versions were recorded (no metadata key, the same columns).
# 3: reasoning apart from the answer (reasoning, reasoning_tokens, answer_tokens, ended_in_reasoning); in older
# files `completion` holds the whole text, think block included (core.reasoning splits it when they are rescored).
ROLLOUT_SCHEMA_VERSION = 3
SCHEMA_VERSION_KEY = b"evalflow.schema_version"


class SchemaVersionError(EvalflowError, ValueError):
    """A file was written by a newer evalflow than this one (or carries an unreadable version)."""

    kind = "store"


class _JsonText:
    """Marks a column stored as JSON text."""


JSON = _JsonText()


class RolloutRecord(BaseModel):
    """One rollout: what was asked, what came back, and the environment's verdict."""

    model_config = ConfigDict(extra="forbid")

    run_id: str = Field(description="the run that collected the rollout (a batch reused from the cache keeps it)")
    benchmark: str = Field(description="the benchmark's environment name, e.g. gsm8k")
    env_version: str = Field(description="the environment's version (bumped on any scoring or prompt change)")
    batch_key: str = Field(description="content key of the batch the rollout was collected in")
    prompt_id: str = Field(description="stable id of the dataset row, unique within the benchmark")
    repeat: Annotated[int, pa.int32()] = Field(description="0-based index of this sample of the prompt")
    seed: int = Field(description="sampling seed sent to the server: a stable hash of (base seed, prompt, repeat)")
    model: str = Field(description="the served model name")
    model_fingerprint: str = Field(description="content hash of the converted checkpoint's files")
    sampling: Annotated[dict[str, Any], JSON] = Field(description="sampling parameters (JSON object)")
    messages: Annotated[list[dict[str, Any]] | str, JSON] = Field(
        description="the opening chat messages (JSON list), or the plain-completion prompt (JSON string)"
    )
    completion: str | None = Field(
        None,
        description="the last assistant answer (after its reasoning: what the environment scored); null when a "
        "single-turn rollout's request failed",
    )
    reasoning: str | None = Field(
        None,
        description="the last assistant turn's reasoning (its think block, without the tags); null when it has none",
    )
    transcript: Annotated[list[dict[str, Any]] | str | None, JSON] = Field(
        None,
        description="the whole conversation incl. the completion and tool messages (JSON list), or the plain "
        "prompt plus completion (JSON string); null when a single-turn rollout's request failed",
    )
    finish_reason: str | None = Field(None, description="the last response's finish reason (stop, length, ...)")
    prompt_tokens: int | None = Field(None, description="prompt tokens, summed over the turns of a conversation")
    completion_tokens: int | None = Field(None, description="generated tokens, summed over the turns")
    reasoning_tokens: int | None = Field(
        None,
        description="generated tokens that were reasoning, summed over the turns: the server's count (a reasoning "
        "parser's); 0 without reasoning; null when the server did not count it",
    )
    answer_tokens: int | None = Field(
        None, description="generated tokens that were the answer: completion_tokens - reasoning_tokens"
    )
    ended_in_reasoning: bool | None = Field(
        None,
        description="the completion was cut off while reasoning (no end tag; no answer): reward 0 whatever the "
        "reasoning says; null in files of schema version 2 and older",
    )
    turns: Annotated[int, pa.int32()] = Field(description="assistant turns")
    tool_calls: Annotated[int, pa.int32()] = Field(description="tool calls the environment executed")
    latency_s: float | None = Field(None, description="seconds spent in requests, summed over the turns")
    reward: float = Field(description="the environment's reward (analysis counts an errored rollout as 0)")
    success: bool = Field(description="the environment's verdict (analysis counts an errored rollout as false)")
    parsed_answer: str | None = Field(None, description="the answer taken from the completion; null when none")
    reference: str | None = Field(None, description="the reference answer")
    error: str | None = Field(None, description="why the rollout failed ('Type: message'); null when it completed")
    info: Annotated[dict[str, Any], JSON] = Field(
        description="environment-specific details (JSON object); its keys are described by the env's metrics"
    )
    created_at: datetime = Field(description="when the batch file was written (UTC, milliseconds)")

    @field_validator("*", mode="before")
    @classmethod
    def _decode_json(cls, value: Any, info: ValidationInfo) -> Any:
        # JSON columns given as text (as read back from a file, or pre-encoded) are the encoded value.
        if isinstance(value, str) and info.field_name in JSON_COLUMNS:
            return json.loads(value)
        return value

    def to_row(self) -> dict[str, Any]:
        """The row as stored: JSON columns encoded."""
        return {name: to_json(value) if name in JSON_COLUMNS and value is not None else value for name, value in self}


_ARROW_TYPES: dict[Any, Any] = {
    str: pa.string(),
    int: pa.int64(),
    float: pa.float64(),
    bool: pa.bool_(),
    datetime: pa.timestamp("ms", tz="UTC"),
}


def _arrow_field(name: str, info: FieldInfo) -> Any:
    args = typing.get_args(info.annotation) if isinstance(info.annotation, types.UnionType) else ()
    nullable = type(None) in args
    explicit = [m for m in info.metadata if isinstance(m, pa.DataType)]
    if explicit:
        arrow_type = explicit[0]
    elif JSON in info.metadata:
        arrow_type = pa.string()
    else:
        arrow_type = _ARROW_TYPES[next(a for a in args if a is not type(None)) if args else info.annotation]
    return pa.field(name, arrow_type, nullable=nullable)


JSON_COLUMNS = tuple(name for name, info in RolloutRecord.model_fields.items() if JSON in info.metadata)
ROLLOUT_SCHEMA = pa.schema(
    [_arrow_field(name, info) for name, info in RolloutRecord.model_fields.items()],
    metadata={SCHEMA_VERSION_KEY: str(ROLLOUT_SCHEMA_VERSION).encode()},
)
COLUMN_DOCS = {name: info.description or "" for name, info in RolloutRecord.model_fields.items()}


def to_json(value: Any) -> str:
    """Deterministic JSON for the nested columns (sorted keys keep files byte-stable)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def to_table(rows: Iterable[RolloutRecord | Mapping[str, Any]]) -> Any:
    """A batch table (a pyarrow.Table): each row checked against RolloutRecord, nested columns encoded, the version in
    the schema metadata."""
    records = [row if isinstance(row, RolloutRecord) else RolloutRecord.model_validate(row) for row in rows]
    return pa.Table.from_pylist([record.to_row() for record in records], schema=ROLLOUT_SCHEMA)


def to_parquet_bytes(rows: Iterable[RolloutRecord | Mapping[str, Any]]) -> bytes:
    """A whole batch file (zstd-compressed parquet), ready for one atomic write."""
    buffer = io.BytesIO()
    pq.write_table(to_table(rows), buffer, compression="zstd")
    return buffer.getvalue()


def check_schema_version(url: str, value: bytes | str | None) -> int:
    """The rollout schema version of the file at `url`, from its metadata value (None: version 1);
    a version this code does not know is refused with a message naming the file."""
    if value is None:
        return 1
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    try:
        version = int(text)
    except ValueError:
        raise SchemaVersionError(
            f"{url}: unreadable rollout schema version {text!r} (metadata key {SCHEMA_VERSION_KEY.decode()})"
        ) from None
    if not 1 <= version <= ROLLOUT_SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{url}: rollout schema version {version} is not supported (this evalflow reads 1 to "
            f"{ROLLOUT_SCHEMA_VERSION}); analyse it with a newer evalflow"
        )
    return version
