"""Dotted key paths into a config's data (`sampling.temperature`, `benchmarks.0.repeats`): the
command line's overrides and a sweep's grid keys both go through here."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml
from pydantic import BaseModel, ValidationError

from core.config import EvalConfig
from errors import ConfigError


class OverrideError(ConfigError):
    """A dotted key that does not name a place in the config, or a malformed key=value."""


def _index(node: Any, part: str, key: str) -> Any:
    if isinstance(node, list):
        size = len(cast(list[Any], node))
        if not part.isdigit() or int(part) >= size:
            raise OverrideError(f"{key!r}: {part!r} is not an index of a {size}-element list")
        return int(part)
    if not isinstance(node, dict):
        raise OverrideError(f"{key!r}: {part!r} is below a value ({node!r}), not a mapping or list")
    return part


def set_path(data: dict[str, Any], key: str, value: Any) -> None:
    """Set `a.b.0.c` to `value`, creating missing mappings on the way."""
    parts = key.split(".")
    node: Any = data
    for i, part in enumerate(parts):
        index = _index(node, part, key)
        if i == len(parts) - 1:
            node[index] = value
            return
        if isinstance(node, dict):
            mapping = cast(dict[Any, Any], node)
            if mapping.get(index) is None:
                mapping[index] = {}
            node = mapping[index]
        else:
            node = node[index]


def has_path(data: Any, key: str) -> bool:
    """Whether `key` names an existing place in `data` (a full config dump, defaults included)."""
    node: Any = data
    for part in key.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(cast(list[Any], node)):
            node = cast(list[Any], node)[int(part)]
        elif isinstance(node, dict) and part in node:
            node = cast(dict[Any, Any], node)[part]
        else:
            return False
    return True


def apply_override(data: dict[str, Any], dotted: str) -> None:
    """Apply `key.path=value`; the value is parsed as YAML (numbers, booleans, lists, ...)."""
    if "=" not in dotted:
        raise OverrideError(f"override {dotted!r} is not key.path=value")
    key, raw = dotted.split("=", 1)
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise OverrideError(f"override {dotted!r}: the value is not YAML ({problem})") from None
    set_path(data, key.strip(), value)


def read_config_file(path: Path) -> Any:
    """A YAML file's data; a missing file or a syntax error is one OverrideError naming file:line:column."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise OverrideError(f"--config {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise OverrideError(f"--config {path}: cannot read it ({exc})") from None
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = " ".join(f"{exc.context or ''} {exc.problem or ''}".split())
        raise OverrideError(f"{where}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise OverrideError(f"{path}: invalid YAML: {' '.join(str(exc).split())}") from None


def config_data(path: str | Path | None, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """A config file's data (plain containers) with overrides applied, not yet validated."""
    data: dict[str, Any] = {}
    if path:
        loaded = read_config_file(Path(path))
        if not isinstance(loaded, dict):
            raise OverrideError(f"{path}: the config must be a mapping of EvalConfig fields")
        data = json.loads(json.dumps(loaded, default=str))  # YAML dates become strings, as a field expects
    if overrides and "benchmarks" not in data and any(o.startswith("benchmarks.") for o in overrides):
        data["benchmarks"] = EvalConfig().model_dump(mode="json")["benchmarks"]
    for override in overrides:
        apply_override(data, override)
    return data


def validation_message(exc: ValidationError) -> str:
    """Pydantic's errors as one line: each as `dotted.field: message`, without the inputs (they may hold secrets)."""
    parts: list[str] = []
    for error in exc.errors(include_url=False, include_input=False):
        field = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        parts.append(f"{field}: {message}" if field else message)
    return "; ".join(parts)


Model = TypeVar("Model", bound=BaseModel)


def validated(model: type[Model], data: Any) -> Model:
    """`data` as a `model`; what pydantic rejects is a ConfigError naming each bad field in one line."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_message(exc)) from exc


def resolve_config(path: str | Path | None, overrides: list[str]) -> EvalConfig:
    """The config file with dotted overrides applied, validated: anything wrong is a ConfigError (a ValueError)."""
    return validated(EvalConfig, config_data(path, overrides))
