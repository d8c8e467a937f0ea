"""The judge of a judged run: runs a row's tests (trusted code) in a process the program can neither read nor reach.

The tests and their expected values live only here. Names the tests take from the program (the function
under test, a class it defines) are `Remote` stand-ins: calling one sends the arguments to the program as
plain data and gets the result back the same way (harness_codec), so every assertion, `math.isclose` and
`abs(a - b) < eps` runs on values this process built itself, with its own builtins and modules. A result
that is not plain data stays a `Remote`, which refuses ==, !=, <, bool() and friends: an object that
claims to equal anything fails. Each test's verdict goes to STATUS_FD, which the program does not have.
Standard library only: it runs inside the sandbox as its own uid.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import json
import os
import sys
from typing import Any

from sandbox.harness_codec import decode, encode, recv, send

REQUEST_FD, REPLY_FD, STATUS_FD = 3, 4, 5
MAX_ERROR_CHARS = 300
# Exceptions from the program that tests may catch by their builtin type (never StopIteration or SystemExit:
# a StopIteration would quietly end an `all(map(...))` in the judge).
CATCHABLE = ("ValueError", "TypeError", "KeyError", "IndexError", "LookupError", "ZeroDivisionError")
CATCHABLE += ("ArithmeticError", "OverflowError", "AttributeError", "NotImplementedError", "RecursionError")


class RemoteError(Exception):
    """The program raised an exception while the judge called into it."""


class ProgramGone(Exception):
    """The program stopped answering (it exited, was killed, or broke the protocol)."""


_remote_errors: dict[str, type[RemoteError]] = {}


def remote_error(name: str, message: str) -> RemoteError:
    """A RemoteError that is also the builtin exception of that name, when tests may catch it as such."""
    if name in CATCHABLE:
        if name not in _remote_errors:
            _remote_errors[name] = type(f"Remote{name}", (RemoteError, getattr(builtins, name)), {})
        return _remote_errors[name](f"the program raised {name}: {message}")
    return RemoteError(f"the program raised {name}: {message}")


class Channel:
    """Requests to the program, replies decoded into this process' own plain objects."""

    def __init__(self, request_fd: int, reply_fd: int) -> None:
        self.request_fd, self.reply_fd = request_fd, reply_fd
        self.gone: str | None = None

    def _receive(self) -> dict[str, Any]:
        if self.gone:
            raise ProgramGone(self.gone)
        try:
            return recv(self.reply_fd)
        except (EOFError, OSError) as exc:
            self.gone = f"the program stopped answering ({exc})"
        except (ValueError, RecursionError, MemoryError) as exc:
            self.gone = f"the program broke the protocol ({type(exc).__name__})"
        raise ProgramGone(self.gone)

    def hello(self) -> str | None:
        """Wait until the program has loaded; why it cannot be tested, or None."""
        try:
            reply = self._receive()
        except ProgramGone as exc:
            return str(exc)
        if reply.get("loaded") is True:
            return None
        error = reply.get("error")
        name, message = error if isinstance(error, list) and len(error) == 2 else ("Error", "")
        self.gone = f"the program failed while loading: {name}: {message}"[:MAX_ERROR_CHARS]
        return self.gone

    def ask(self, op: str, target: dict[str, Any], **fields: Any) -> Any:
        message = {"op": op, "f": target, **{key: encode(value, self._node) for key, value in fields.items()}}
        if self.gone:
            raise ProgramGone(self.gone)
        try:
            send(self.request_fd, message)
        except OSError as exc:
            self.gone = f"the program stopped answering ({exc})"
            raise ProgramGone(self.gone) from None
        reply = self._receive()
        if set(reply) == {"ok"}:
            try:
                return decode(reply["ok"], self._resolve)
            except (ValueError, TypeError, RecursionError, MemoryError) as exc:
                raise RemoteError(f"the program's result is not plain data ({exc})") from None
        error = reply.get("err")
        if set(reply) == {"err"} and isinstance(error, list) and len(error) == 2 and all(type(e) is str for e in error):
            raise remote_error(error[0], error[1])
        self.gone = "the program broke the protocol"
        raise ProgramGone(self.gone)

    @staticmethod
    def _node(obj: Any) -> dict[str, Any]:
        if type(obj) is Remote:
            return Remote.node(obj)
        raise TypeError(f"only plain data and the program's own objects can be passed to it, not {type(obj).__name__}")

    def _resolve(self, tag: str, payload: Any) -> Remote:
        if tag == "ref" and type(payload) is int:
            return Remote(self, {"t": "ref", "v": payload})
        raise ValueError(f"unknown reference {tag!r}")


class Remote:
    """An object that lives in the program: it can be called, indexed, iterated, measured, never compared."""

    __slots__ = ("_channel", "_target")

    def __init__(self, channel: Channel, target: dict[str, Any]) -> None:
        self._channel, self._target = channel, target

    @staticmethod
    def node(remote: Remote) -> dict[str, Any]:
        return remote._target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._channel.ask("call", self._target, a=args, k=kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # no protocol probing (copy, pickle) and no recursion on unset slots
            raise AttributeError(name)
        return self._channel.ask("getattr", self._target, n=name)

    def __getitem__(self, key: Any) -> Any:
        return self._channel.ask("getitem", self._target, key=key)

    def __len__(self) -> int:
        return self._channel.ask("len", self._target)

    def __iter__(self) -> Any:
        return iter(self._channel.ask("list", self._target))

    def __str__(self) -> str:
        return self._channel.ask("str", self._target)

    def __repr__(self) -> str:
        return f"<program object {self._target['v']!r}>"

    def _refuse(self, *_: Any) -> Any:
        raise TypeError(f"{self!r} is not plain data: the judge does not compare it or test its truth")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = _refuse
    __hash__ = object.__hash__


def import_modules(namespace: dict[str, Any], sources: list[str]) -> None:
    """Import the standard modules the tests use without importing them (MBPP's bare `math.isclose`).

    The judge's own modules, never the program's: a program-defined `math` must not judge itself.
    """
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                name = node.value.id
                if name not in namespace and not hasattr(builtins, name) and name in sys.stdlib_module_names:
                    namespace[name] = importlib.import_module(name)


def _describe(test: str, exc: BaseException) -> str:
    first = test.strip().splitlines()[0] if test.strip() else ""
    try:
        detail = str(exc)
    except Exception:
        detail = ""
    return f"{first[:150]}: {type(exc).__name__}{': ' + detail if detail else ''}"[:MAX_ERROR_CHARS]


def report(fd: int, index: int, ok: bool, error: str | None = None) -> None:
    line = "test " + json.dumps({"i": index, "ok": ok, "error": error}) + "\n"
    os.write(fd, line.encode("ascii"))


def main(spec_path: str, fds: str = f"{REQUEST_FD},{REPLY_FD},{STATUS_FD}") -> None:
    """Run every test of the spec (`{"setup", "tests", "remote"}`); report each on the status fd."""
    request_fd, reply_fd, status_fd = map(int, fds.split(","))
    sys.set_int_max_str_digits(0)
    with open(spec_path) as f:
        spec = json.load(f)
    tests: list[str] = spec["tests"]
    channel = Channel(request_fd, reply_fd)
    problem = channel.hello()
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(spec["setup"], "<setup>", "exec"), namespace)
        for name in spec["remote"]:
            namespace[name] = Remote(channel, {"t": "g", "v": name})
        import_modules(namespace, [spec["setup"], *tests])
    except Exception as exc:
        problem = problem or _describe("the tests' setup", exc)
    for index, test in enumerate(tests):
        if problem:
            report(status_fd, index, False, problem)
            continue
        try:
            exec(compile(test, f"<test {index}>", "exec"), namespace)
        except BaseException as exc:
            report(status_fd, index, False, _describe(test, exc))
        else:
            report(status_fd, index, True)
