"""Wire format between a judged program and its judge: plain values as tagged JSON in length-prefixed frames.

Plain values (None, bool, int, float, complex, str, bytes, bytearray, list, tuple, set, frozenset, dict, and
subclasses of these, sent as their base value) cross as data; anything else becomes a reference the
`ref` callback makes. Decoding builds only those builtin types, so nothing a sender writes can run code
or override a comparison on the receiving side. Standard library only: it runs inside the sandbox.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

MAX_FRAME = 64 * 1024 * 1024
MAX_DEPTH = 100
HEADER = 4

_SCALARS = (bool, int, float, str)


def encode(value: Any, ref: Callable[[Any], dict[str, Any]], depth: int = 0) -> Any:
    """A JSON-able tree for `value`; non-plain objects become `ref(value)` (which may raise TypeError).

    Types are read with type(), not isinstance(), which an object can fool with a `__class__` property;
    subclasses travel as their base value through the base type's own methods.
    """
    if depth > MAX_DEPTH:
        raise ValueError(f"value nested deeper than {MAX_DEPTH} levels")
    if value is None or value is True or value is False:
        return value
    kind = type(value)
    down = depth + 1
    if issubclass(kind, int):
        return int.__int__(value)
    if issubclass(kind, float):
        return float.__float__(value)
    if issubclass(kind, str):
        return str.__str__(value)
    if issubclass(kind, list):
        return [encode(x, ref, down) for x in list.__iter__(value)]
    if issubclass(kind, tuple):
        return {"t": "tuple", "v": [encode(x, ref, down) for x in tuple.__iter__(value)]}
    if issubclass(kind, frozenset):
        return {"t": "frozenset", "v": [encode(x, ref, down) for x in frozenset.__iter__(value)]}
    if issubclass(kind, set):
        return {"t": "set", "v": [encode(x, ref, down) for x in set.__iter__(value)]}
    if issubclass(kind, dict):
        return {"t": "dict", "v": [[encode(k, ref, down), encode(v, ref, down)] for k, v in dict.items(value)]}
    if issubclass(kind, bytes):
        return {"t": "bytes", "v": bytes.hex(value)}
    if issubclass(kind, bytearray):
        return {"t": "bytearray", "v": bytearray.hex(value)}
    if issubclass(kind, complex):
        return {"t": "complex", "v": [complex.real.__get__(value), complex.imag.__get__(value)]}
    return ref(value)


def decode(node: Any, resolve: Callable[[str, Any], Any], depth: int = 0) -> Any:
    """The value `encode` described; tags other than the plain ones go to `resolve(tag, payload)`."""
    if depth > MAX_DEPTH:
        raise ValueError(f"value nested deeper than {MAX_DEPTH} levels")
    if node is None or type(node) in _SCALARS:
        return node
    down = depth + 1
    if type(node) is list:
        return [decode(x, resolve, down) for x in node]
    if type(node) is not dict or set(node) != {"t", "v"} or type(node["t"]) is not str:
        raise ValueError(f"malformed value node of type {type(node).__name__}")
    tag, payload = node["t"], node["v"]
    if tag in ("tuple", "set", "frozenset", "dict"):
        if type(payload) is not list:
            raise ValueError(f"malformed {tag} node")
        items = [decode(x, resolve, down) for x in payload]
        if tag == "tuple":
            return tuple(items)
        if tag == "set":
            return set(items)
        if tag == "frozenset":
            return frozenset(items)
        if not all(type(pair) is list and len(pair) == 2 for pair in items):
            raise ValueError("malformed dict node")
        return {k: v for k, v in items}
    if tag in ("bytes", "bytearray") and type(payload) is str:
        return bytes.fromhex(payload) if tag == "bytes" else bytearray.fromhex(payload)
    if tag == "complex" and type(payload) is list and len(payload) == 2:
        if not all(type(x) in (int, float) for x in payload):
            raise ValueError("malformed complex node")
        return complex(payload[0], payload[1])
    return resolve(tag, payload)


def send(fd: int, message: dict[str, Any]) -> None:
    """Write one frame: a 4-byte big-endian length, then the message as ASCII JSON."""
    body = json.dumps(message, separators=(",", ":")).encode("ascii")
    if len(body) > MAX_FRAME:
        raise ValueError(f"message of {len(body)} bytes exceeds {MAX_FRAME}")
    view = memoryview(len(body).to_bytes(HEADER, "big") + body)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv(fd: int) -> dict[str, Any]:
    """Read one frame; EOFError when the writer is gone, ValueError when the frame is malformed."""
    size = int.from_bytes(_read_exactly(fd, HEADER), "big")
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes exceeds {MAX_FRAME}")
    message = json.loads(_read_exactly(fd, size))
    if type(message) is not dict:
        raise ValueError("a frame must hold a JSON object")
    return message
