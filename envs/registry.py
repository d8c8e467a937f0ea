"""Which environment a benchmark names, wherever it lives: a name registered through the `evalflow.envs`
entry-point group (evalflow's own benchmarks register there too, in pyproject.toml), `package.module:Class`,
`path/to/file.py:Class`, or a declarative task (`path/to/task.yaml`, or an inline mapping; envs.task_env).

A reference is resolved where it enters (core.config, relative to the working directory) and loaded here;
every failure is one `EnvLoadError` line that names the reference, what is wrong and the host (a deployment's
worker that lacks a user's package fails before any server starts, saying which worker).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import re
import socket
import sys
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from envs.base import Env, MetricSpec, SingleTurnEnv
from errors import EvalflowError

ENTRY_POINT_GROUP = "evalflow.envs"
TASK_SUFFIXES = (".yaml", ".yml")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class EnvLoadError(EvalflowError, ValueError):
    """A benchmark's environment cannot be found, imported or used; the message says which and why."""

    kind = "config"


def is_reference(name: str) -> bool:
    """Whether `name` points at code or a task file (`mod:Class`, `file.py:Class`, `task.yaml`), not a name."""
    return ":" in name or name.endswith(TASK_SUFFIXES)


def is_file_reference(name: str) -> bool:
    """`path/to/file.py:Class` or `path/to/task.yaml`: a path, resolved against the working directory once."""
    return name.endswith(TASK_SUFFIXES) or (":" in name and name.rsplit(":", 1)[0].endswith(".py"))


@cache
def _entry_points() -> dict[str, list[EntryPoint]]:
    found: dict[str, list[EntryPoint]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if all(ep.value != other.value for other in found.get(ep.name, [])):  # one package seen twice on sys.path
            found.setdefault(ep.name, []).append(ep)
    return found


def registered_names() -> list[str]:
    return sorted(_entry_points())


def registered_origin(name: str) -> str:
    """Where a registered name comes from: the distribution that declares it (evalflow for the built-ins)."""
    eps = _entry_points().get(name, [])
    return ", ".join(sorted(f"{ep.dist.name if ep.dist else '?'} ({ep.value})" for ep in eps)) or "?"


def _registered(name: str) -> type[Env]:
    eps = _entry_points().get(name)
    if not eps:
        known = ", ".join(registered_names())
        raise EnvLoadError(
            f"unknown environment {name!r} on host {socket.gethostname()}; known: {known} (or name a class, "
            "`package.module:Class` or "
            "`path/to/file.py:Class`, or a task file `path/to/task.yaml`)"
        )
    if len(eps) > 1:
        raise EnvLoadError(
            f"environment {name!r} is registered by {len(eps)} packages: {registered_origin(name)}; uninstall one "
            "or name the class as `package.module:Class`"
        )
    try:
        cls = eps[0].load()
    except Exception as exc:  # a plugin that fails to import: say which, on which host
        raise EnvLoadError(f"environment {name!r} ({eps[0].value}): {_import_failure(exc)}") from None
    cls = _checked(cls, f"environment {name!r} ({eps[0].value})")
    if cls.name != name:  # records and reports name the class's `name`: two names for one thing would split them
        raise EnvLoadError(
            f"environment {name!r} ({eps[0].value}) calls itself {cls.name!r}: register it under that name"
        )
    return cls


def _import_failure(exc: BaseException) -> str:
    first = " ".join(str(exc).split())[:300]
    return f"cannot be imported on host {socket.gethostname()}: {type(exc).__name__}: {first}"


def _module_class(ref: str) -> type[Env]:
    module_name, _, cls_name = ref.rpartition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise EnvLoadError(f"environment {ref!r}: module {module_name!r} {_import_failure(exc)}") from None
    return _attribute(module, cls_name, ref)


def _attribute(module: Any, cls_name: str, ref: str) -> type[Env]:
    cls = getattr(module, cls_name, None)
    if cls is None:
        found = sorted(
            n
            for n, v in vars(module).items()
            if inspect.isclass(v) and issubclass(v, Env) and v.__module__ == module.__name__
        )
        raise EnvLoadError(
            f"environment {ref!r}: no class {cls_name!r} there; environments there: {', '.join(found) or 'none'}"
        )
    return _checked(cls, f"environment {ref!r}")


@cache
def _file_module(path: str, stamp: tuple[int, int]) -> Any:
    """A user's file imported as its own module (cached per path and modification; `stamp` keys the cache)."""
    digest = hashlib.sha256(path.encode()).hexdigest()[:10]
    name = f"evalflow_user_env_{re.sub(r'[^A-Za-z0-9_]', '_', Path(path).stem)}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look classes up by module
    try:
        spec.loader.exec_module(module)
    except Exception:
        sys.modules.pop(name, None)
        raise
    return module


def _file_class(ref: str) -> type[Env]:
    file, _, cls_name = ref.rpartition(":")
    path = Path(file)
    if not path.is_file():
        raise EnvLoadError(f"environment {ref!r}: no file {file} on host {socket.gethostname()}")
    stat = path.stat()
    try:
        module = _file_module(str(path), (stat.st_mtime_ns, stat.st_size))
    except Exception as exc:
        raise EnvLoadError(f"environment {ref!r}: {file} {_import_failure(exc)}") from None
    return _attribute(module, cls_name, ref)


def _checked(cls: Any, what: str) -> type[Env]:
    if not (inspect.isclass(cls) and issubclass(cls, Env)):
        raise EnvLoadError(f"{what} is not an environment: a subclass of envs.base.SingleTurnEnv or MultiTurnEnv")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
        raise EnvLoadError(f"{what} does not implement {missing}")
    if issubclass(cls, SingleTurnEnv) and not cls.defines_score():
        raise EnvLoadError(f"{what} does not implement score (or ascore, when its scoring awaits)")
    for attr in ("name", "version"):
        value = getattr(cls, attr, None)
        if not isinstance(value, str) or not _NAME.match(value):
            raise EnvLoadError(
                f"{what}: class attribute {attr!r} must be a string of letters, digits, '_.-', got {value!r}"
            )
    return cls


def _task_class(task: str | Mapping[str, Any], where: str) -> type[Env]:
    from envs.task_env import task_env_class
    from envs.task_spec import load_task_spec

    return task_env_class(load_task_spec(task, where=where))


def env_class(ref: str | Mapping[str, Any], where: str = "benchmark") -> type[Env]:
    """The environment class a benchmark names (see the module docstring); raises EnvLoadError."""
    if isinstance(ref, Mapping):
        return _task_class(ref, where)
    if ref.endswith(TASK_SUFFIXES):
        return _task_class(ref, where)
    if ":" not in ref:
        return _registered(ref)
    if is_file_reference(ref):
        return _file_class(ref)
    return _module_class(ref)


def find_env(ref: str | None) -> type[Env] | None:
    """The environment class, or None when it cannot be loaded here (a benchmark of an older run, a user's
    environment this machine lacks): for reports, which then show what the record holds."""
    if not ref:
        return None
    try:
        return env_class(ref)
    except EvalflowError:
        return None


def get_env(ref: str | Mapping[str, Any], /, **options: Any) -> Env:
    """An environment instance configured with the config's env options; unknown names list the known ones."""
    cls = env_class(ref)
    label = ref if isinstance(ref, str) else cls.name
    try:
        inspect.signature(cls).bind(**options)
    except TypeError as e:
        raise EnvLoadError(f"environment {label!r}: bad options {sorted(options)}: {e}") from None
    return cls(**options)


def metric_specs(names: Iterable[str]) -> dict[str, tuple[MetricSpec, ...]]:
    """The metrics each named environment declares; a name with no environment here (a benchmark of an
    older run, say) declares none."""
    return {name: cls.metrics if (cls := find_env(name)) else () for name in names}


class _Registered(Mapping[str, type[Env]]):
    """The registered environments by name (evalflow's own and installed plugins'), loaded on first use."""

    def __getitem__(self, name: str) -> type[Env]:
        if name not in _entry_points():
            raise KeyError(name)
        return _registered(name)

    def __iter__(self) -> Iterator[str]:
        return iter(registered_names())

    def __len__(self) -> int:
        return len(_entry_points())


ENVS: Mapping[str, type[Env]] = _Registered()
