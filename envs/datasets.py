"""Load benchmark rows, validated up front: JSONL or parquet on any fsspec URL, or a `datasets` split.

Every row is checked before anything is sent to a server, so a typo on line 4,000 costs seconds,
not the hours of rollouts before it. Files are opened by an `opener` the caller passes (the flow's
opens through the run store, so its options and credentials apply); the default is plain `fsspec.open`.

Dataset specs:
- a path or fsspec URL of a JSONL or CSV (with a header line; optionally compressed) or parquet file:
  `data/gsm8k/test.jsonl`, `s3://bucket/gsm8k.parquet`, also `hf://datasets/openai/gsm8k/main/test-00000-of-00001.parquet`
  (fsspec's own `hf://` protocol reads one file of a hub repository);
- `hf-dataset:<path>[?config=<name>&split=<split>&revision=<rev>&data_files=<file>]`: a split loaded
  with `datasets.load_dataset` (hub id such as `openai/gsm8k`, a local data folder, or a packaged
  builder such as `json` with `data_files=`) or, for a folder written by `save_to_disk`, with
  `datasets.load_from_disk`. `split` defaults to `test`; `data_files` may repeat. Example:
  `hf-dataset:openai/gsm8k?config=main&split=test`. The library's cache (`HF_HOME`,
  `HF_DATASETS_CACHE`) applies, so a dataset downloaded once loads offline afterwards.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any, BinaryIO, cast
from urllib.parse import parse_qs
from uuid import UUID

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from envs.base import DatasetError, Env

PARQUET_SUFFIXES = (".parquet", ".pq")
CSV_SUFFIX = ".csv"
COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst")
HF_DATASET_SCHEME = "hf-dataset:"
HF_DATASET_PARAMS = ("config", "split", "revision", "data_files")
HF_DEFAULT_SPLIT = "test"

# url -> a context manager yielding the file's bytes, decompressed (by suffix) when it is compressed.
Opener = Callable[[str], AbstractContextManager[BinaryIO]]


def fsspec_opener(url: str) -> AbstractContextManager[BinaryIO]:
    """Open a local path or fsspec URL with fsspec's defaults (its own credential lookup)."""
    return cast(AbstractContextManager[BinaryIO], fsspec.open(url, "rb", compression="infer"))


def _is_parquet(url: str) -> bool:
    return url.split("?", 1)[0].lower().endswith(PARQUET_SUFFIXES)


def _is_csv(url: str) -> bool:
    name = url.split("?", 1)[0].lower()
    for suffix in COMPRESSION_SUFFIXES:
        name = name.removesuffix(suffix)
    return name.endswith(CSV_SUFFIX)


def _csv_rows(url: str, f: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line, row) of a CSV file with a header line; every value a string."""
    reader = csv.DictReader(io.TextIOWrapper(f, encoding="utf-8", newline=""))
    try:
        for row in reader:
            if None in row or None in row.values():
                raise DatasetError(f"{url}:{reader.line_num}: not as many values as the header has columns")
            yield reader.line_num, row
    except (csv.Error, UnicodeDecodeError) as e:
        raise DatasetError(f"{url}:{reader.line_num}: not valid CSV ({e})") from e


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


@cache
def read_examples(path: Path, check: Callable[[dict[str, Any], str], None] | None = None) -> tuple[dict[str, Any], ...]:
    """A shipped JSONL file of few-shot examples, each row checked with `check(row, "file:line")`, read once
    per process."""
    with path.open("rb") as f:
        rows = list(_jsonl_rows(str(path), f))
    for lineno, row in rows:
        if check is not None:
            check(row, f"{path}:{lineno}")
    return tuple(row for _, row in rows)


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
    opener: Opener | None = None,
    limit: int | None = None,
    places: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """All rows of a dataset (then the first `limit`), each validated by the env; ids must be unique.

    JSONL (optionally compressed, by suffix) or parquet, from a local path or any fsspec URL, opened
    with `opener` (default: `fsspec_opener`). `places`, if given, receives each prompt id's place in
    the file (`file:line`, `spec row N`), for later checks' messages.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if is_hf_dataset(url):
        # The datasets library has its own cache and credentials: the opener is not used.
        rows = _validated(_hf_dataset_rows(url, env), env, lambda n: f"{url} row {n}", "row", places)
    else:
        rows = _file_rows(url, env, opener or fsspec_opener, places)
    if not rows:
        raise DatasetError(f"{url}: the dataset has no rows")
    return rows if limit is None else rows[:limit]


def _validated(
    numbered: Iterator[tuple[int, dict[str, Any]]],
    env: Env,
    where_of: Callable[[int], str],
    unit: str,
    places: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Each row checked by the env (errors name the row's place via `where_of(number)`); ids must be unique."""
    rows: list[dict[str, Any]] = []
    first_seen: dict[str, int] = {}
    for number, row in numbered:
        where = where_of(number)
        env.validate_row(row, where)
        pid = env.prompt_id(row)
        if pid in first_seen:
            raise DatasetError(f"{where}: duplicate prompt id {pid!r} (first on {unit} {first_seen[pid]})")
        first_seen[pid] = number
        if places is not None:
            places[pid] = where
        rows.append(row)
    return rows


def _file_rows(url: str, env: Env, opener: Opener, places: dict[str, str] | None) -> list[dict[str, Any]]:
    try:
        with opener(url) as f:
            numbered = (
                _parquet_rows(url, f)
                if _is_parquet(url)
                else _csv_rows(url, f)
                if _is_csv(url)
                else _jsonl_rows(url, f)
            )
            return _validated(numbered, env, lambda n: f"{url}:{n}", "line", places)
    except FileNotFoundError as e:
        raise DatasetError(
            f"{url}: dataset file not found; provide a JSONL, parquet or CSV file of {env.name!r} rows "
            f"at this path (or point the config at another one)"
        ) from e


def is_hf_dataset(spec: str) -> bool:
    """Whether a dataset spec names a `datasets`-library dataset (`hf-dataset:...`) rather than a file."""
    return spec.startswith(HF_DATASET_SCHEME)


def parse_hf_dataset(spec: str) -> dict[str, Any]:
    """`hf-dataset:<path>?config=..&split=..&revision=..&data_files=..` -> keyword arguments for the library.

    Returns `{"path", "config", "split", "revision", "data_files"}` (absent ones None; `split` defaults to
    "test"; `data_files` a list). A leading `//` after the scheme is dropped (`hf-dataset://org/name`).
    """
    if not is_hf_dataset(spec):
        raise DatasetError(f"{spec}: not a {HF_DATASET_SCHEME} dataset spec")
    rest = spec[len(HF_DATASET_SCHEME) :]
    path, _, query = rest.partition("?")
    if path.startswith("//"):
        path = path[2:]
    if not path:
        raise DatasetError(
            f"{spec}: no dataset named; expected e.g. {HF_DATASET_SCHEME}openai/gsm8k?config=main&split=test"
        )
    params = parse_qs(query, keep_blank_values=True, strict_parsing=False)
    unknown = sorted(set(params) - set(HF_DATASET_PARAMS))
    if unknown:
        raise DatasetError(f"{spec}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(HF_DATASET_PARAMS)}")
    out: dict[str, Any] = {"path": path, "data_files": params.get("data_files") or None}
    for key in ("config", "split", "revision"):
        values = params.get(key, [])
        if len(values) > 1:
            raise DatasetError(f"{spec}: parameter {key!r} given {len(values)} times")
        if values and not values[0]:
            raise DatasetError(f"{spec}: parameter {key!r} is empty")
        out[key] = values[0] if values else None
    out["split"] = out["split"] or HF_DEFAULT_SPLIT
    return out


def _is_saved_dataset(path: str) -> bool:
    """A folder written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`."""
    folder = Path(path).expanduser()
    return (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()


def _hf_dataset_rows(spec: str, env: Env) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based row number, row) of the spec's split, loaded with the `datasets` library."""
    args = parse_hf_dataset(spec)
    import datasets  # heavy (pandas, ...): only when a spec asks for it
    from datasets.exceptions import DatasetNotFoundError, DatasetsError

    instead = (
        f"download it where the hub is reachable and pass benchmarks.<i>.dataset=/path/to/{args['split']}.jsonl "
        f"(a JSONL or parquet file of {env.name!r} rows, with the fields of the shipped {env.default_dataset})"
    )
    try:
        if _is_saved_dataset(args["path"]):
            loaded: Any = datasets.load_from_disk(str(Path(args["path"]).expanduser()))
            if isinstance(loaded, datasets.DatasetDict):
                if args["split"] not in loaded:
                    splits = ", ".join(str(s) for s in loaded)
                    raise DatasetError(f"{spec}: no split {args['split']!r} in {args['path']}; splits: {splits}")
                loaded = loaded[args["split"]]
        else:
            loaded = datasets.load_dataset(
                args["path"],
                args["config"],
                split=args["split"],
                revision=args["revision"],
                data_files=args["data_files"],
            )
    except DatasetError:
        raise
    except ConnectionError as e:  # offline (HF_HUB_OFFLINE) or no network, and not in the local cache
        raise DatasetError(
            f"{spec}: cannot load Hugging Face dataset {args['path']!r}: the hub cannot be reached and the "
            f"dataset is not in the local datasets cache ({e}); {instead}"
        ) from e
    except DatasetNotFoundError as e:
        raise DatasetError(
            f"{spec}: Hugging Face dataset {args['path']!r} not found (or gated: set HF_TOKEN) ({e}); {instead}"
        ) from e
    except (FileNotFoundError, ValueError, DatasetsError) as e:
        # missing data files, an unknown config or split, a file the builder cannot parse
        raise DatasetError(f"{spec}: cannot load Hugging Face dataset {args['path']!r}: {e}") from e
    except Exception as e:  # the library's own failures (e.g. an IndexError on a saved empty dataset)
        raise DatasetError(f"{spec}: cannot load Hugging Face dataset {args['path']!r}: {type(e).__name__}: {e}") from e
    if not isinstance(loaded, datasets.Dataset):
        raise DatasetError(f"{spec}: expected one split, got {type(loaded).__name__}")
    yield from enumerate(loaded.to_list(), start=1)


def _json_default(obj: Any) -> Any:
    """Stable, tagged encodings for the non-JSON values parquet (or a `datasets` split) can produce.

    pyarrow gives these for date, timestamp, time, duration, binary, decimal and uuid columns (pandas'
    Timestamp and Timedelta, subclasses, for nanosecond units); maps come as lists of pairs, plain JSON.
    """
    if isinstance(obj, bytes):
        return {"__bytes__": obj.hex()}
    if isinstance(obj, dt.date | dt.datetime | dt.time):
        return {"__datetime__": obj.isoformat()}
    if isinstance(obj, dt.timedelta):
        return {"__timedelta__": str(obj)}  # pandas' Timedelta (pyarrow's ns durations) keeps its nanoseconds
    if isinstance(obj, Decimal):
        return {"__decimal__": str(obj)}
    if isinstance(obj, UUID):
        return {"__uuid__": str(obj)}
    raise TypeError(f"cannot hash a value of type {type(obj).__name__} in a dataset row")


def rows_hash(rows: list[dict[str, Any]]) -> str:
    """sha256 hex of the rows' canonical JSON: the dataset part of rollout cache keys (tasks.collection.plan).

    Sorted keys, no whitespace, parquet's dates, bytes and decimals tagged (`_json_default`); plain JSON
    rows encode exactly as envs.base.canonical_json does, so their cache keys did not change.
    """
    text = json.dumps(rows, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default)
    return hashlib.sha256(text.encode()).hexdigest()
