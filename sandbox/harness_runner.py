"""The program's side of a judged run: load the model's code, then answer the judge's requests with plain values.

Runs as the sandboxed program (throwaway uid), so everything here is at the model code's mercy: it can
patch, replace or kill this loop. That is harmless by design: the judge (another uid, another process)
holds the tests and the expected values, compares them itself, and takes every answer that is not plain
data, and every silence, as a failure. Standard library only.
"""

from __future__ import annotations

import builtins
import sys
import traceback
from typing import Any

from sandbox.harness_codec import decode, encode, recv, send

REQUEST_FD, REPLY_FD = 3, 4
PROGRAM_NAME = "main.py"
MAX_ERROR_CHARS = 500


def _error(exc: BaseException) -> list[str]:
    try:
        return [type(exc).__name__, str(exc)[:MAX_ERROR_CHARS]]
    except Exception:  # a model exception whose __str__ fails
        return [type(exc).__name__, ""]


class Objects:
    """What the judge may name: the program's globals (tag "g") and the objects it got references to ("ref")."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.namespace = namespace
        self.held: list[Any] = []

    def ref(self, obj: Any) -> dict[str, Any]:
        self.held.append(obj)
        return {"t": "ref", "v": len(self.held) - 1}

    def resolve(self, tag: str, payload: Any) -> Any:
        if tag == "ref" and type(payload) is int and 0 <= payload < len(self.held):
            return self.held[payload]
        if tag == "g" and type(payload) is str:
            if payload not in self.namespace:
                raise NameError(f"name {payload!r} is not defined")
            return self.namespace[payload]
        raise ValueError(f"unknown reference {tag!r}")


def answer(objects: Objects, request: dict[str, Any]) -> Any:
    """Carry out one request on the program's objects."""
    target = decode(request["f"], objects.resolve)
    op = request["op"]
    if op == "call":
        args = decode(request["a"], objects.resolve)
        kwargs = decode(request["k"], objects.resolve)
        return target(*args, **kwargs)
    if op == "getattr":
        return getattr(target, request["n"])
    if op == "getitem":
        return target[decode(request["key"], objects.resolve)]
    if op == "len":
        return len(target)
    if op == "list":
        return list(target)
    if op == "str":
        return str(target)
    raise ValueError(f"unknown request {op!r}")


def serve(objects: Objects, request_fd: int, reply_fd: int) -> None:
    """Answer requests until the judge closes the channel."""
    while True:
        try:
            request = recv(request_fd)
        except EOFError:
            return
        try:
            reply: dict[str, Any] = {"ok": encode(answer(objects, request), objects.ref)}
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from model code are answers too
            traceback.print_exc()
            reply = {"err": _error(exc)}
        send(reply_fd, reply)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()


def main(fds: str = f"{REQUEST_FD},{REPLY_FD}") -> None:
    """Load main.py from the working folder, then serve the judge on the (request, reply) fds."""
    request_fd, reply_fd = map(int, fds.split(","))
    sys.set_int_max_str_digits(0)
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins, "__file__": PROGRAM_NAME}
    try:
        with open(PROGRAM_NAME, "rb") as f:
            source = f.read()
        exec(compile(source, PROGRAM_NAME, "exec"), namespace)
    except BaseException as exc:  # a program that exits or raises while loading fails every test
        traceback.print_exc()
        send(reply_fd, {"loaded": False, "error": _error(exc)})
        return
    send(reply_fd, {"loaded": True})
    serve(Objects(namespace), request_fd, reply_fd)
