"""Find a secret in files the way an attacker with read access would: every layer decoded, nothing unpickled.

`find_secret(roots, secrets)` reads every regular file under `roots` and looks for each secret raw,
as UTF-16, base64 (std and urlsafe, any alignment) and hex, then decodes what an attacker would:
base64 and hex runs (MIME-wrapped and JSON-escaped too), URL, HTML and JSON escapes, JSON strings,
gzip/zlib/bz2/xz/lzma/zstd/lz4 data, zip and tar members, pickles (opcodes walked with
`pickletools.genops`, never loaded), parquet and Arrow IPC values and metadata, and SQLite cells
(with the database's -wal applied). Decoded layers are followed up to `MAX_DEPTH` deep. Each
finding reads "<file>: <layers> > <form>", e.g. "result.json: json > base64 > pickle bytes > raw".
Escaped text is searched for the secret's plain forms, but its base64 and hex runs are not decoded again.
Not read: encrypted archives (reported as not scanned), numeric, date and boolean columns (they cannot
spell text), and data a format marks deleted (SQLite free pages, superseded zip entries) beyond a raw search.
"""

from __future__ import annotations

import base64
import binascii
import bz2
import hashlib
import html
import io
import json
import lzma
import math
import os
import pickletools
import re
import sqlite3
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import unquote_to_bytes

import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq

MAX_BYTES = 200 * 2**20  # a bigger file is reported as not scanned; also the cap on one decompressed blob
MAX_DEPTH = 10  # decoding layers followed inside one file (Prefect's compressed results need about 7)
MIN_SECRET = 8  # a shorter secret would turn up by chance
SEP = b"\x00"  # joins extracted strings: no base64, hex or JSON run crosses it

# Runs of 16+ base64 or hex characters are found on a copy with each class mapped to one letter: a literal
# pattern is searched ~6x faster than a character class. A base64 run then takes its padding and the
# following lines of a wrapped block (real or JSON-escaped newlines) from the text.
B64_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-"
B64_CLASS = bytes(b"a"[0] if i in B64_CHARS else b" "[0] for i in range(256))
HEX_CLASS = bytes(b"h"[0] if i in b"0123456789abcdefABCDEF" else b" "[0] for i in range(256))
LONG_B64, LONG_HEX = re.compile(b"a" * 16 + b"+"), re.compile(b"h" * 16 + b"+")
NEWLINE = re.compile(rb"\r?\n|\\r\\n|\\n")
B64_RUN = re.compile(rb"[A-Za-z0-9+/_-]+={0,2}(?:(?:" + NEWLINE.pattern + rb")[A-Za-z0-9+/_-]+={0,2})*")
URLSAFE = bytes.maketrans(b"-_", b"+/")
URL_ESCAPE = re.compile(rb"%[0-9A-Fa-f]{2}")
HTML_ESCAPE = re.compile(rb"&(?:#[0-9]+|#[xX][0-9A-Fa-f]+|[A-Za-z]+);")
JSON_ESCAPE = re.compile(rb"\\u([0-9A-Fa-f]{4})")
PRINTABLE = bytes(range(32, 127)) + b"\t\n\r"
MAGIC_FIRST = {bytes([b]) for b in b"\x1f\x78B\xfd\x5d\x28\x04PSA\xff\x80"}
COMPRESSED = {"gzip", "zlib", "bz2", "xz", "lzma", "zstd", "lz4"}
STRINGY = (
    pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view,
    pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view, pa.types.is_fixed_size_binary,
)  # fmt: skip
LISTS = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list, pa.types.is_list_view,
         pa.types.is_large_list_view)  # fmt: skip
Chain = tuple[str, ...]


def _needles(secrets: list[str]) -> list[tuple[str, bytes]]:
    """(form, bytes) for every way a secret can sit verbatim in a file."""
    out: list[tuple[str, bytes]] = []
    for secret in secrets:
        if len(secret) < MIN_SECRET:
            raise ValueError(f"a secret to look for needs {MIN_SECRET}+ characters, got {len(secret)}")
        raw = secret.encode()
        out += [("raw", raw), ("utf-16", secret.encode("utf-16-le")), ("utf-16", secret.encode("utf-16-be"))]
        out += [("hex", raw.hex().encode()), ("hex", raw.hex().upper().encode())]
        for shift in range(3):  # the characters that depend on the secret alone, for each alignment
            encoded = base64.b64encode(b"\x00" * shift + raw)
            needle = encoded[math.ceil(8 * shift / 6) : 8 * (shift + len(raw)) // 6]
            out += [("base64", needle), ("base64", needle.translate(bytes.maketrans(b"+/", b"-_")))]
    return out


def _meaningful(blob: bytes) -> bool:
    """Whether a decoded run is worth decoding further: a known format or mostly text (UTF-8 or UTF-16)."""
    if _format(blob):
        return True
    sample = blob[:4096]
    if sample.count(0) > len(sample) // 3:  # UTF-16: the other half of the bytes is text
        sample = sample[::2] if sample[1::2].count(0) > sample[::2].count(0) else sample[1::2]
    return bool(sample) and len(sample.translate(None, PRINTABLE)) <= len(sample) // 10


def _format(blob: bytes) -> str | None:
    """The container or compression a blob starts with, by magic bytes."""
    head = blob[:16]
    if head[:1] not in MAGIC_FIRST and blob[257:262] != b"ustar":  # most blobs: no dict built
        return None
    magics = {
        "gzip": head[:2] == b"\x1f\x8b",
        "zlib": head[:1] == b"\x78" and head[1:2] in (b"\x01", b"\x5e", b"\x9c", b"\xda"),
        "bz2": head[:3] == b"BZh" and head[3:4].isdigit(),
        "xz": head[:6] == b"\xfd7zXZ\x00",
        "lzma": head[:3] == b"\x5d\x00\x00",
        "zstd": head[:4] == b"\x28\xb5\x2f\xfd",
        "lz4": head[:4] == b"\x04\x22\x4d\x18",
        "zip": head[:4] in (b"PK\x03\x04", b"PK\x05\x06"),
        "tar": blob[257:262] == b"ustar",
        "sqlite": head == b"SQLite format 3\x00",
        "parquet": head[:4] == b"PAR1" and blob[-4:] == b"PAR1",
        "arrow": head[:6] == b"ARROW1"
        or (head[:4] == b"\xff" * 4 and 8 < int.from_bytes(head[4:8], "little") < len(blob)),
        "pickle": head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"),
    }
    return next((name for name, hit in magics.items() if hit), None)


def _b64_blobs(run: bytes) -> Iterator[tuple[bytes, bool]]:
    """(decoded, wrapped) for a base64 run: a wrapped block (equal-length lines, then a shorter last) as
    one, other lines alone. A run that starts mid-quad (text glued to its front) decodes to noise."""
    if b"\n" not in run and b"\\" not in run:  # the common case, kept fast: one line
        chars = run.rstrip(b"=").translate(URLSAFE)
        if len(chars) % 4 != 1:
            yield binascii.a2b_base64(chars + b"=="), False
        return
    lines = [line.rstrip(b"=").translate(URLSAFE) for line in NEWLINE.split(run)]
    i = 0
    while i < len(lines):
        j = i
        while j + 1 < len(lines) and len(lines[j + 1]) == len(lines[i]) and len(lines[i]) % 4 == 0:
            j += 1
        if j + 1 < len(lines) and j > i and len(lines[j + 1]) < len(lines[i]):
            j += 1
        chars = b"".join(lines[i : j + 1])
        chars = chars[: len(chars) - (len(chars) % 4 == 1)]
        if len(chars) >= 16:
            yield binascii.a2b_base64(chars + b"=="), j > i
        i = j + 1


def _unescape_html(data: bytes) -> bytes:
    return html.unescape(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


def _unescape_json(data: bytes) -> bytes:
    """`\\uXXXX` escapes resolved, for JSON that is not a whole file (a log line, a cell, a pickled string)."""
    return JSON_ESCAPE.sub(lambda m: chr(int(m[1], 16)).encode("utf-8", "surrogatepass"), data)


ESCAPES: tuple[tuple[str, re.Pattern[bytes], Callable[[bytes], bytes]], ...] = (
    ("urlencoded", URL_ESCAPE, unquote_to_bytes),
    ("html entities", HTML_ESCAPE, _unescape_html),
    ("json escapes", JSON_ESCAPE, _unescape_json),
)


def _json_strings(data: bytes) -> list[bytes] | None:
    """Every key and string value of a JSON document or JSON-lines file, or None when it is neither."""
    if data.lstrip()[:1] not in (b"{", b"["):
        return None
    try:
        stack = [json.loads(data)]
    except ValueError:
        try:
            stack = [json.loads(line) for line in data.splitlines() if line.strip()]
        except ValueError:
            return None
    out = []
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            out.append(value.encode("utf-8", "surrogatepass"))
        elif isinstance(value, dict):
            stack += [*value.keys(), *value.values()]
        elif isinstance(value, list):
            stack += value
    return out


def _decompress(kind: str, data: bytes, cap: int) -> bytes:
    """Up to cap + 1 bytes of a compressed blob; a corrupt or truncated one gives what decodes."""
    try:
        if kind in ("gzip", "zlib"):
            inflater = zlib.decompressobj(47)  # 32 + 15: either header
            out = inflater.decompress(data, cap + 1)
            while kind == "gzip" and inflater.unused_data[:2] == b"\x1f\x8b" and len(out) <= cap:  # more members
                rest, inflater = inflater.unused_data, zlib.decompressobj(47)
                out += inflater.decompress(rest, cap + 1 - len(out))
            return out
        if kind == "bz2":
            return bz2.BZ2Decompressor().decompress(data, cap + 1)
        if kind in ("xz", "lzma"):
            return lzma.LZMADecompressor().decompress(data, cap + 1)
        return pa.CompressedInputStream(pa.BufferReader(data), kind).read(cap + 1)  # zstd, lz4 frame
    except (OSError, EOFError, zlib.error, lzma.LZMAError, pa.ArrowException):
        return b""


def _leaves(array: pa.Array) -> Iterator[pa.Array]:
    """The string and binary arrays inside a (possibly nested) Arrow array."""
    kind = array.type
    if isinstance(array, pa.ExtensionArray):
        yield from _leaves(array.storage)
    elif pa.types.is_dictionary(kind):
        yield from _leaves(array.dictionary)
    elif pa.types.is_struct(kind):
        for child in array.flatten():
            yield from _leaves(child)
    elif pa.types.is_map(kind):
        yield from _leaves(array.keys)
        yield from _leaves(array.items)
    elif pa.types.is_union(kind):
        for i in range(kind.num_fields):
            yield from _leaves(array.field(i))
    elif any(check(kind) for check in LISTS):
        yield from _leaves(array.flatten())
    elif any(check(kind) for check in STRINGY):
        yield array


class _Scanner:
    """Findings for one `find_secret` call; `where` and `seen` are per file."""

    def __init__(self, secrets: list[str], max_bytes: int) -> None:
        self.needles = _needles(secrets)
        self.max_bytes = max_bytes
        self.findings: dict[str, None] = {}
        self.where = ""
        self.wal: bytes | None = None
        self.seen: set[bytes] = set()
        self.handlers: dict[str, Callable[[bytes, Chain, int], None]] = {
            "zip": self.zip, "tar": self.tar, "sqlite": self.sqlite, "parquet": self.parquet,
            "arrow": self.arrow, "pickle": self.pickle,
        }  # fmt: skip

    def report(self, chain: Chain) -> None:
        self.findings[f"{self.where}: {' > '.join(chain)}"] = None

    def file(self, path: Path) -> None:
        self.where, self.seen, self.wal = str(path), set(), None
        size = path.stat().st_size
        if size > self.max_bytes:
            self.report((f"not scanned ({size} bytes, over {self.max_bytes})",))
            return
        data = path.read_bytes()
        wal = path.with_name(path.name + "-wal")
        if _format(data) == "sqlite" and wal.is_file() and wal.stat().st_size <= self.max_bytes:
            self.wal = wal.read_bytes()  # Prefect's committed rows may still live only here
        self.blob(data, (), 0)

    def match(self, data: bytes, chain: Chain, baseline: bytes | None = None) -> None:
        """Report each form found; with a baseline, only forms the decoding added."""
        for form, needle in self.needles:
            if needle in data and (baseline is None or data.count(needle) > baseline.count(needle)):
                self.report((*chain, form))

    def first(self, data: bytes) -> bool:
        """Whether this file has not met these bytes yet (and now has)."""
        key = hashlib.blake2b(data, digest_size=16).digest()
        new = key not in self.seen
        self.seen.add(key)
        return new

    def child(self, data: bytes, chain: Chain, depth: int) -> None:
        """A decoded blob, scanned once per file."""
        if self.first(data):
            self.blob(data, chain, depth + 1)

    def blob(self, data: bytes, chain: Chain, depth: int) -> None:
        self.match(data, chain)
        if depth >= MAX_DEPTH or len(data) < MIN_SECRET:
            return
        kind = _format(data)
        if kind in COMPRESSED:
            out = _decompress(kind, data, self.max_bytes)
            if len(out) > self.max_bytes:
                self.report((*chain, kind, f"not scanned past {self.max_bytes} bytes"))
            self.child(out[: self.max_bytes], (*chain, kind), depth)
            return
        if kind is not None:
            try:
                self.handlers[kind](data, (*chain, kind), depth)
            except (ValueError, OSError, EOFError, sqlite3.Error, pa.ArrowException, zipfile.BadZipFile,
                    tarfile.TarError, NotImplementedError, RuntimeError) as error:  # fmt: skip
                if kind != "pickle":  # a truncated pickle is checked as far as it reads, in `pickle`
                    self.report((*chain, kind, f"not scanned ({type(error).__name__}: {error})"))
        self.text(data, chain, depth)

    def text(self, data: bytes, chain: Chain, depth: int) -> None:
        """Text decodings: UTF-16, JSON strings, base64 and hex runs, URL and HTML escapes."""
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            self.child(data.decode("utf-16", "replace").encode(), (*chain, "utf-16 text"), depth)
        strings = _json_strings(data)
        view = data if strings is None else SEP.join(strings)
        if strings is not None:
            chain = (*chain, "json")
            self.match(view, chain, baseline=data)
        self.runs(view, chain, depth)
        # Escaped text gets the needles only (base64 with %2B in it included): decoding its runs again
        # would double the time on every HTML report for the rare nested blob written escaped.
        for label, pattern, decode in ESCAPES:
            if pattern.search(view) and (decoded := decode(view)) != view:
                self.match(decoded, (*chain, label), baseline=view)

    def runs(self, data: bytes, chain: Chain, depth: int) -> None:
        """Decoded base64 and hex runs. The needles already cover a secret encoded straight into a one-line
        run, so a run that decodes to noise (most are words) is only searched when it was wrapped."""
        if b"\\/" in data:  # JSON may escape the slashes of base64
            data = data.replace(b"\\/", b"/")
        end = 0
        for candidate in LONG_B64.finditer(data.translate(B64_CLASS)):
            if candidate.start() < end:  # a later line of the wrapped block just read
                continue
            run = B64_RUN.match(data, candidate.start())
            end = run.end()
            if end - run.start() > 256 and not self.first(b"run" + run.group()):
                continue  # a long run seen before (a Prefect db holds a cell both in its rows and raw)
            for blob, wrapped in _b64_blobs(run.group()):
                if _meaningful(blob):
                    self.child(blob, (*chain, "base64"), depth)
                elif wrapped:
                    self.match(blob, (*chain, "base64"))
        for run in LONG_HEX.finditer(data.translate(HEX_CLASS)):
            chars = data[run.start() : run.end()]
            for start in range(1 + len(chars) % 2):  # an odd run: either end may be the stray digit
                blob = bytes.fromhex(chars[start : start + len(chars) - len(chars) % 2].decode())
                if _meaningful(blob):
                    self.child(blob, (*chain, "hex"), depth)

    def pickle(self, data: bytes, chain: Chain, depth: int) -> None:
        """Every string and bytes argument of every opcode, for each pickle in the blob; nothing is loaded."""
        stream, texts = io.BytesIO(data), []
        try:
            start = -1
            while stream.tell() > start and _format(data[stream.tell() : stream.tell() + 2]) == "pickle":
                start = stream.tell()
                for _, arg, _ in pickletools.genops(stream):
                    if isinstance(arg, str):
                        texts.append(arg.encode("utf-8", "surrogatepass"))
                        if not arg.isascii() and max(arg) <= "\xff":  # protocol 0-2 keep bytes as latin-1 text
                            self.child(arg.encode("latin-1"), (*chain, "pickle bytes"), depth)
                    elif isinstance(arg, bytes | bytearray):
                        self.child(bytes(arg), (*chain, "pickle bytes"), depth)
        finally:
            self.child(SEP.join(texts), (*chain, "pickle string"), depth)

    def zip(self, data: bytes, chain: Chain, depth: int) -> None:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                label = f"member {info.filename}"
                if info.flag_bits & 1 or info.file_size > self.max_bytes:
                    self.report((*chain, label, "not scanned (encrypted or too big)"))
                elif not info.is_dir():
                    self.child(archive.read(info), (*chain, label), depth)

    def tar(self, data: bytes, chain: Chain, depth: int) -> None:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            for member in archive:
                if member.isfile() and (handle := archive.extractfile(member)) is not None:
                    self.child(handle.read(self.max_bytes), (*chain, f"member {member.name}"), depth)

    def sqlite(self, data: bytes, chain: Chain, depth: int) -> None:
        """Every text and blob cell of every table, read from a private copy (with the -wal for a file)."""
        with tempfile.TemporaryDirectory() as folder:
            db = Path(folder, "db")
            db.write_bytes(data)
            if depth == 0 and self.wal is not None:
                Path(folder, "db-wal").write_bytes(self.wal)
            con = sqlite3.connect(db)
            try:
                con.text_factory = bytes
                tables = [r[0].decode() for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
                for table in tables:
                    for column in [r[1].decode() for r in con.execute(f"PRAGMA table_info({_quote(table)})")]:
                        self.cells(con, table, column, (*chain, f"row {table}.{column}"), depth)
            finally:
                con.close()

    def cells(self, con: sqlite3.Connection, table: str, column: str, chain: Chain, depth: int) -> None:
        t, c = _quote(table), _quote(column)
        (text,) = con.execute(f"SELECT group_concat({c}, char(0)) FROM {t} WHERE typeof({c}) = 'text'").fetchone()
        self.child(text or b"", chain, depth)
        for (blob,) in con.execute(f"SELECT {c} FROM {t} WHERE typeof({c}) = 'blob' AND length({c}) >= ?",
                                   (MIN_SECRET,)):  # fmt: skip
            self.child(blob, chain, depth)

    def parquet(self, data: bytes, chain: Chain, depth: int) -> None:
        source = pq.ParquetFile(pa.BufferReader(data))
        extra = source.metadata.metadata or {}
        self.arrow_table(source.read(), dict(extra), chain, depth)

    def arrow(self, data: bytes, chain: Chain, depth: int) -> None:
        reader = pa.ipc.open_file if data[:6] == b"ARROW1" else pa.ipc.open_stream
        self.arrow_table(reader(pa.BufferReader(data)).read_all(), {}, chain, depth)

    def arrow_table(self, table: pa.Table, extra: dict[bytes, bytes], chain: Chain, depth: int) -> None:
        """Schema and field metadata, then every string and binary value of every column."""
        metadata = {**(table.schema.metadata or {}), **extra}  # the writer's own keys first, ARROW:schema last
        for field in table.schema:
            metadata.update(field.metadata or {})
        self.child(SEP.join(b for pair in metadata.items() for b in pair), (*chain, "metadata"), depth)
        for name, column in zip(table.column_names, table.columns, strict=True):
            values: list[bytes] = []
            for leaf in (leaf for chunk in column.chunks for leaf in _leaves(chunk)):
                values += leaf.drop_null().cast(pa.large_binary()).to_pylist()
            for value in values:
                if _format(value):  # a binary cell holding a container or compressed blob
                    self.child(value, (*chain, f"column {name}"), depth)
            self.child(SEP.join(values), (*chain, f"column {name}"), depth)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _files(roots: list[Path]) -> Iterator[Path]:
    for root in roots:
        if not root.exists():
            raise FileNotFoundError(f"nothing to scan at {root}")
        paths = [root] if root.is_file() else _walk(root)
        # Regular files only (links followed): a FIFO would block, a socket or a dead link has no bytes.
        yield from (path for path in paths if path.exists() and stat.S_ISREG(path.stat().st_mode))


def _walk(root: Path) -> Iterator[Path]:
    """Every file under root, in name order (findings come out in the same order every run)."""
    for folder, subfolders, names in os.walk(root):
        subfolders.sort()
        yield from (Path(folder, name) for name in sorted(names))


def find_secret(roots: list[Path], secrets: list[str], max_bytes: int = MAX_BYTES) -> list[str]:
    """Findings "<file>: <how found>" for every place a secret can be read back from the files under roots;
    a file over max_bytes is a finding too ("not scanned"), so an empty list means every byte was checked."""
    scanner = _Scanner(secrets, max_bytes)
    for path in _files(roots):
        try:
            scanner.file(path)
        except OSError as error:  # unreadable: say so rather than pass it as clean
            scanner.where = str(path)
            scanner.report((f"not scanned ({type(error).__name__}: {error})",))
    return list(scanner.findings)
