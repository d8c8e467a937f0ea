"""The secret scanner finds a key however a file encodes it, and finds nothing in files that lack it."""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import json
import lzma
import os
import pickle
import shutil
import sqlite3
import tarfile
import time
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import cloudpickle
import httpx
import openai
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from prefect.results import ResultRecord, ResultRecordMetadata
from prefect.serializers import CompressedSerializer, PickleSerializer

from tests.secretscan import find_secret

SECRET = "sk-proj-Zq8vN3xK7mW2pL9tR4yB6cD1"
OTHER = "sk-proj-Hn5tY2wQ8eR1uI7oP4aS9dF3"  # written nowhere: every scan for it must come back empty
BEARER = f"Bearer {SECRET}".encode()
# A log with the key amid text: enough literals that zstd entropy-codes them, so the key is not in its bytes.
_WORDS = b"the model answered with a number then stopped after reasoning about each step".split()
LOG = b" ".join(_WORDS[i * 7 % len(_WORDS)] for i in range(600)) + b" authorization: " + BEARER + b" done"


def _text(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda folder: (folder / name).write_bytes(data)


def _parquet(folder: Path) -> None:
    """A nested column (list of header structs), zstd-compressed."""
    headers = [[{"name": "authorization", "value": LOG.decode()}], [], None]
    table = pa.table({"id": [1, 2, 3], "headers": headers})
    pq.write_table(table, folder / "rollouts.parquet", compression="zstd", write_statistics=False)  # stats: raw


def _parquet_metadata(folder: Path) -> None:
    config = json.dumps({"server": {"api_key": SECRET}}).encode()
    table = pa.table({"x": [1]}).replace_schema_metadata({"evalflow.config": base64.b64encode(gzip.compress(config))})
    pq.write_table(table, folder / "meta.parquet")


def _parquet_blob(folder: Path) -> None:
    pq.write_table(pa.table({"payload": [b"\x00" * 8, zlib.compress(BEARER)]}), folder / "blobs.parquet")


def _feather(folder: Path) -> None:
    feather.write_feather(pa.table({"log": ["ok", LOG.decode()]}), folder / "t.arrow", "zstd")


def _sqlite(folder: Path) -> None:
    """A text cell (base64 of JSON) and a blob cell (zlib), both only in the -wal, as a live Prefect's are."""
    live = folder / "live"
    live.mkdir()
    con = sqlite3.connect(live / "prefect.db")
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute('CREATE TABLE "task run" (id INTEGER, "state data" TEXT, payload BLOB)')
    state = base64.b64encode(json.dumps({"headers": BEARER.decode()}).encode()).decode()
    con.executemany('INSERT INTO "task run" VALUES (?, ?, ?)', [(1, "{}", None), (2, state, zlib.compress(BEARER))])
    con.commit()
    for name in ("prefect.db", "prefect.db-wal"):  # copied while open: closing would checkpoint the -wal
        (folder / name).write_bytes((live / name).read_bytes())
    con.close()
    shutil.rmtree(live)


def _zip(folder: Path) -> None:
    with zipfile.ZipFile(folder / "logs.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("run/client.log", LOG)


def _tar_gz(folder: Path) -> None:
    data = LOG
    with tarfile.open(folder / "logs.tar.gz", "w:gz") as archive:
        info = tarfile.TarInfo("run/client.log")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))


def _pa_compressed(codec: str) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, codec) as stream:
        stream.write(LOG)
    return sink.getvalue().to_pybytes()


# name -> (writer, a finding it must give, whether the file holds the key in plain bytes too)
CASES: dict[str, tuple[Callable[[Path], None], str, bool]] = {
    "raw": (_text("client.log", b"POST /v1/chat/completions authorization: " + BEARER), "client.log: raw", True),
    "utf-16": (_text("win.log", f"authorization: Bearer {SECRET}".encode("utf-16-le")), "win.log: utf-16", False),
    "base64 in json": (
        _text("headers.json", json.dumps({"authorization": base64.b64encode(BEARER).decode()}).encode()),
        "headers.json: base64",
        False,
    ),
    "base64 of gzip": (
        _text("blob.txt", b"payload=" + base64.b64encode(gzip.compress(BEARER))),
        "blob.txt: base64 > gzip > raw",
        False,
    ),
    "json unicode escapes": (
        _text("esc.json", ('{"key": "' + "".join(f"\\u{ord(c):04x}" for c in SECRET) + '"}').encode()),
        "esc.json: json > raw",
        False,
    ),
    "json escapes in a log line": (
        _text("j.log", ('sent body={"key": "' + "".join(f"\\u{ord(c):04x}" for c in SECRET) + '"}').encode()),
        "j.log: json escapes > raw",
        False,
    ),
    "pickle of a dict": (
        _text("d.pkl", pickle.dumps({"headers": {"authorization": BEARER.decode()}})),
        "d.pkl: pickle > pickle string > raw",
        True,
    ),
    "pickle of compressed bytes": (
        _text("b.pkl", pickle.dumps({"body": gzip.compress(BEARER)})),
        "b.pkl: pickle > pickle bytes > gzip > raw",
        False,
    ),
    "protocol 2 pickle of bytes": (
        _text("p2.pkl", pickle.dumps({"body": zlib.compress(BEARER)}, protocol=2)),
        "p2.pkl: pickle > pickle bytes > zlib > raw",
        False,
    ),
    "pickle of an exception": (
        _text("e.pkl", pickle.dumps(RuntimeError(f"401 Unauthorized for Bearer {SECRET}"))),
        "e.pkl: pickle > pickle string > raw",
        True,
    ),
    "parquet column": (_parquet, "rollouts.parquet: parquet > column headers > raw", False),
    "parquet metadata": (_parquet_metadata, "meta.parquet: parquet > metadata > base64 > gzip > raw", False),
    "parquet binary cell": (_parquet_blob, "blobs.parquet: parquet > column payload > zlib > raw", False),
    "arrow ipc": (_feather, "t.arrow: arrow > column log > raw", False),
    "sqlite text cell in the -wal": (
        _sqlite,
        "prefect.db: sqlite > row task run.state data > base64 > raw",
        False,
    ),
    "sqlite blob cell": (_sqlite, "prefect.db: sqlite > row task run.payload > zlib > raw", False),
    "hex": (_text("h.txt", b"dump: " + BEARER.hex().encode()), "h.txt: hex", False),
    "hex of gzip": (
        _text("hz.txt", b"dump " + gzip.compress(BEARER).hex().encode()),
        "hz.txt: hex > gzip > raw",
        False,
    ),
    "urlencoded": (
        _text("q.txt", b"GET /?auth=" + "".join(f"%{b:02X}" for b in BEARER).encode()),
        "q.txt: urlencoded > raw",
        False,
    ),
    "html entities": (
        _text("r.html", "".join(f"&#{ord(c)};" for c in SECRET).encode()),
        "r.html: html entities > raw",
        False,
    ),
    "zip member": (_zip, "logs.zip: zip > member run/client.log > raw", False),
    "tar.gz member": (_tar_gz, "logs.tar.gz: gzip > tar > member run/client.log > raw", False),
    "bz2": (_text("x.bz2", bz2.compress(LOG)), "x.bz2: bz2 > raw", False),
    "xz": (_text("x.xz", lzma.compress(LOG)), "x.xz: xz > raw", False),
    "zstd": (_text("x.zst", _pa_compressed("zstd")), "x.zst: zstd > raw", False),
    "lz4": (_text("x.lz4", _pa_compressed("lz4")), "x.lz4: lz4 > raw", True),
}


@pytest.mark.parametrize("case", CASES)
def test_a_file_holding_the_secret_is_found(case: str, tmp_path: Path) -> None:
    write, expected, plain = CASES[case]
    write(tmp_path)
    findings = find_secret([tmp_path], [SECRET])
    assert f"{tmp_path}/{expected}" in findings, findings
    # a case meant to need decoding must not hold the key in plain bytes: else it would test nothing
    held = any(SECRET.encode() in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert held == plain
    assert find_secret([tmp_path], [OTHER]) == []


def _not_found_error() -> openai.NotFoundError:
    """What openai raises for a server that does not serve the model, with the request that carried the key."""
    request = httpx.Request(
        "POST", "http://127.0.0.1:8000/v1/chat/completions", headers={"authorization": f"Bearer {SECRET}"}, json={}
    )
    response = httpx.Response(404, request=request, json={"error": {"message": "The model `x` does not exist."}})
    return openai.NotFoundError("Error code: 404", response=response, body=None)


def test_a_prefect_result_record_of_an_openai_error_is_found(tmp_path: Path) -> None:
    """Prefect's own result file: JSON, MIME-wrapped base64 of a cloudpickle, and the compressed (xz) variant."""
    error = _not_found_error()
    assert SECRET.encode() in cloudpickle.dumps(error)  # the leak issue 13 item 6 is about
    storage = tmp_path / "storage"
    storage.mkdir()
    for name, serializer in [("plain", PickleSerializer()), ("xz", CompressedSerializer(serializer="pickle"))]:
        record = ResultRecord(metadata=ResultRecordMetadata(storage_key=name, serializer=serializer), result=error)
        (storage / name).write_bytes(record.serialize())
        assert SECRET.encode() not in (storage / name).read_bytes()
    findings = find_secret([tmp_path], [SECRET])
    assert f"{storage}/plain: json > base64 > pickle > pickle bytes > raw" in findings, findings
    assert f"{storage}/xz: json > base64 > xz > base64 > pickle > pickle bytes > raw" in findings, findings
    assert find_secret([tmp_path], [OTHER]) == []


def test_clean_files_of_every_kind_give_no_finding(tmp_path: Path) -> None:
    """Every case above side by side, with noise, scanned for another key: nothing, not even a 'not scanned'."""
    for name, (write, _, _) in CASES.items():
        (tmp_path / name).mkdir()
        write(tmp_path / name)
    (tmp_path / "noise.bin").write_bytes(bytes(range(256)) * 4096)
    (tmp_path / "ids.txt").write_bytes(b"\n".join(f"{i:064x} {i:08d}".encode() for i in range(10_000)))
    assert find_secret([tmp_path], [OTHER]) == []
    findings = find_secret([tmp_path], [SECRET])
    assert all(f"{tmp_path}/{name}/{expected}" in findings for name, (_, expected, _) in CASES.items())


def test_any_of_several_secrets_is_found(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text(f"aws_secret_access_key={OTHER}")
    assert find_secret([tmp_path], [SECRET, OTHER]) == [f"{tmp_path}/a.log: raw"]


def test_a_file_over_the_limit_is_reported_not_passed(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(b"\x00" * 2000)
    (tmp_path / "bomb.gz").write_bytes(gzip.compress(b"\x00" * 5000))
    findings = find_secret([tmp_path], [SECRET], max_bytes=1000)
    assert findings == [
        f"{tmp_path}/big.bin: not scanned (2000 bytes, over 1000)",
        f"{tmp_path}/bomb.gz: gzip > not scanned past 1000 bytes",
    ]


def test_an_unreadable_container_is_reported_not_passed(tmp_path: Path) -> None:
    (tmp_path / "broken.parquet").write_bytes(b"PAR1" + b"\x00" * 64 + b"PAR1")
    (tmp_path / "broken.db").write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    findings = find_secret([tmp_path], [SECRET])
    assert [f.split(" (")[0] for f in sorted(findings)] == [
        f"{tmp_path}/broken.db: sqlite > not scanned",
        f"{tmp_path}/broken.parquet: parquet > not scanned",
    ]


def test_a_truncated_pickle_is_read_as_far_as_it_goes(tmp_path: Path) -> None:
    whole = pickle.dumps([gzip.compress(BEARER), "x" * 100])
    (tmp_path / "cut.pkl").write_bytes(whole[:-40])
    assert find_secret([tmp_path], [SECRET]) == [f"{tmp_path}/cut.pkl: pickle > pickle bytes > gzip > raw"]


def test_a_fifo_is_skipped_not_read(tmp_path: Path) -> None:
    """Reading a FIFO would block the test run forever; a dead link has no bytes."""
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "dead").symlink_to(tmp_path / "missing")
    assert find_secret([tmp_path], [SECRET]) == []


def test_bad_arguments_fail_loudly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="8"):
        find_secret([tmp_path], ["short"])
    with pytest.raises(FileNotFoundError):
        find_secret([tmp_path / "missing"], [SECRET])


def test_a_store_and_prefect_home_of_50_mb_scan_in_seconds(tmp_path: Path) -> None:
    """Rollout parquet, JSON-lines logs, a Prefect database with JSON state cells and result records."""
    rows = [{"prompt": f"question {i} " * 20, "completion": f"answer {i} " * 40, "meta": {"id": f"{i:032x}"}}
            for i in range(20_000)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rollouts.parquet")
    (tmp_path / "run.log").write_text("\n".join(json.dumps({"level": "INFO", "row": r}) for r in rows))
    con = sqlite3.connect(tmp_path / "prefect.db")
    con.execute("CREATE TABLE task_run_state (id TEXT, data TEXT, result BLOB)")
    record = ResultRecord(
        metadata=ResultRecordMetadata(storage_key="k", serializer=PickleSerializer()), result=rows[:20]
    )
    cells = [(f"{i:032x}", json.dumps(rows[i % 100]), record.serialize()) for i in range(2000)]
    con.executemany("INSERT INTO task_run_state VALUES (?, ?, ?)", cells)
    con.commit()
    con.close()
    size = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert size > 50 * 2**20
    started = time.process_time()  # CPU time: other processes on a shared machine do not count
    assert find_secret([tmp_path], [SECRET]) == []
    spent = time.process_time() - started
    print(f"scanned {size / 2**20:.0f} MB in {spent:.1f} s of CPU")
    assert spent < 10  # about 2 s here
