"""The reference of what pydantic models declare: the config's fields (from `EvalConfig` down) and the run files'
columns and keys (`core.schema.RolloutRecord`, `core.record.RunRecord`, `core.record.IndexEntry`).

A field's meaning is its `description`, else the comment beside it in the source, else its note in
docs/_hooks/record_notes.py (for the record models' keys the code leaves undescribed).
"""

from __future__ import annotations

import ast
import functools
import inspect
import io
import json
import tokenize
import types
import typing
from pathlib import Path
from typing import Any

from docs._hooks.markdown_text import cell, code, on_path, slug, table


def _is_model(tp: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _strip_annotated(tp: Any) -> Any:
    return typing.get_args(tp)[0] if typing.get_origin(tp) is typing.Annotated else tp


def nested_models(tp: Any) -> list[type]:
    """The pydantic models a field's type mentions (inside unions, lists, dicts)."""
    tp = _strip_annotated(tp)
    if _is_model(tp):
        return [tp]
    found: list[type] = []
    for arg in typing.get_args(tp):
        found += [m for m in nested_models(arg) if m not in found]
    return found


def reachable_models(root: type, root_path: str = "") -> list[tuple[type, list[str]]]:
    """Every model reachable from `root` through its fields, breadth first, with the dotted paths where it sits
    (`N` for a list item, `<key>` for a dict value). Fields excluded from dumps (`exclude=True`) are skipped."""
    found: dict[type, list[str]] = {root: [root_path]}
    queue = [(root, root_path)]
    while queue:
        model, path = queue.pop(0)
        for name, info in model.model_fields.items():
            if info.exclude:
                continue
            here = f"{path}.{name}" if path else name
            annotation = _strip_annotated(info.annotation)
            for sub in nested_models(annotation):
                sub_path = here + _container_suffix(annotation, sub)
                if sub not in found:
                    found[sub] = [sub_path]
                    queue.append((sub, sub_path))
                elif sub_path not in found[sub]:
                    found[sub].append(sub_path)
    return list(found.items())


def _container_suffix(tp: Any, model: type) -> str:
    """`.N` when `model` sits in a list of `tp`, `.<key>` in a dict's values; nothing when it is `tp` itself."""
    tp = _strip_annotated(tp)
    if tp is model:
        return ""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        return next((_container_suffix(a, model) for a in args if model in nested_models(a)), "")
    if origin is list and args:
        return ".N" + _container_suffix(args[0], model)
    if origin is dict and len(args) == 2:
        return ".<name>" + _container_suffix(args[1], model)
    return ""


def type_text(tp: Any, links: dict[type, str]) -> str:
    """A field's type as a reader writes it: `int`, `"a" | "b"`, `list[str]`, a model linked to its table."""
    tp = _strip_annotated(tp)
    if tp is type(None):
        return "null"
    if _is_model(tp):
        return f"[{tp.__name__}]({links[tp]})" if tp in links else tp.__name__
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return " \\| ".join(f"`{json.dumps(a)}`" for a in args)
    if origin in (types.UnionType, typing.Union):
        return " \\| ".join(type_text(a, links) for a in args)
    if origin in (list, tuple, dict):
        inner = ", ".join("..." if a is Ellipsis else type_text(a, links) for a in args)
        return f"{origin.__name__}[{inner}]"
    name = getattr(tp, "__name__", None) or str(tp)
    return {"SecretStr": "secret string", "JsonValue": "JSON", "datetime": "datetime"}.get(name, name)


def _bounds(info: Any) -> str:
    marks = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "length ≥", "max_length": "length ≤"}
    found = []
    for meta in info.metadata:
        for attr, mark in marks.items():
            value = getattr(meta, attr, None)
            if value is not None:
                found.append(f"{mark} {value:g}" if isinstance(value, int | float) else f"{mark} {value}")
    return ", ".join(found)


def _plain(value: Any) -> Any:
    """A default as JSON-like data: models as their fields that differ from their defaults, secrets revealed
    (a default is no secret)."""
    from pydantic import BaseModel, SecretStr

    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_defaults=True)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def default_text(info: Any) -> str:
    from pydantic_core import PydanticUndefined

    if info.is_required():
        return "required"
    if info.default_factory is not None:
        value = info.default_factory()
        if _is_model(type(value)) and value == type(value)():
            return "its defaults"
    else:
        value = info.default
    if value is PydanticUndefined:
        return ""
    value = _plain(value)
    if value in ({}, []) or value is None:
        return "`null`" if value is None else f"`{json.dumps(value)}`"
    return code(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


@functools.cache
def _module_source(file: str) -> tuple[ast.Module, dict[int, str], list[str]]:
    """A module's syntax tree, its comments by line (tool directives left out) and its lines, read once."""
    source = Path(file).read_text()
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            if not text.startswith(("fmt:", "type:", "pyright:", "noqa")):
                comments[tok.start[0]] = text
    return ast.parse(source), comments, source.splitlines()


def _source_comments(model: type) -> dict[str, str]:
    """The comments beside a model's fields in its source (on the field's lines, else just above it), for
    the record models whose fields carry no description."""
    file = inspect.getsourcefile(model)
    if file is None:
        return {}
    tree, comments, lines = _module_source(file)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == model.__name__), None)
    found: dict[str, str] = {}
    for field in node.body if node else []:
        if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name):
            end = field.end_lineno or field.lineno
            own = [comments[n] for n in range(field.lineno, end + 1) if n in comments]
            above: list[str] = []
            n = field.lineno - 1
            while n in comments and lines[n - 1].strip().startswith("#"):
                above.insert(0, comments[n])
                n -= 1
            if own or above:
                found[field.target.id] = " ".join(own or above)
    return found


def _model_doc(model: type) -> str:
    doc = model.__doc__ or ""
    from pydantic import BaseModel

    if doc == (BaseModel.__doc__ or "") or not doc.strip():
        return ""
    return cell(inspect.cleandoc(doc))


def model_tables(root: type, root_path: str = "", defaults: bool = True, level: int = 2) -> str:
    """One section per model reachable from `root`: where it sits, its docstring, and a table of its fields
    (type with constraints, default, description; a field without a description shows its source comment)."""
    found = reachable_models(root, root_path)
    links = {model: f"#{slug(model.__name__)}" for model, _ in found}
    parts: list[str] = []
    for model, paths in found:
        where = ", ".join(f"`{p}`" for p in paths if p) or "the top level"
        parts.append(f"{'#' * level} {model.__name__}\n\n*At {where}.* {_model_doc(model)}\n")
        comments = {**_record_notes(model), **_source_comments(model)}
        rows: list[list[str]] = []
        for name, info in model.model_fields.items():
            if info.exclude:
                continue
            kind = type_text(info.annotation, links)
            bounds = _bounds(info)
            row = [f"`{name}`", kind + (f" ({bounds})" if bounds else "")]
            if defaults:
                row.append(default_text(info))
            row.append(cell(info.description or comments.get(name, "")))
            rows.append(row)
        head = ["field", "type", "default", "description"] if defaults else ["key", "type", "meaning"]
        parts.append(table(head, rows) + "\n")
    return "\n".join(parts)


def _record_notes(model: type) -> dict[str, str]:
    from docs._hooks.record_notes import NOTES

    prefix = model.__name__ + "."
    return {key.removeprefix(prefix): note for key, note in NOTES.items() if key.startswith(prefix)}


def record_notes_problems() -> list[str]:
    """Notes that name no field of the run files' models, and notes the code now makes redundant."""
    from core.record import IndexEntry, RunRecord
    from docs._hooks.record_notes import NOTES

    models = {m.__name__: m for root in (RunRecord, IndexEntry) for m, _ in reachable_models(root)}
    problems: list[str] = []
    for key in NOTES:
        model_name, _, field = key.partition(".")
        model = models.get(model_name)
        if model is None or field not in model.model_fields:
            problems.append(f"{key}: no such field in the run files' models")
        elif model.model_fields[field].description or field in _source_comments(model):
            problems.append(f"{key}: the code describes it now; delete the note")
    return problems


def config_models() -> list[tuple[type, list[str]]]:
    """Every config model a run's YAML file can set, from `EvalConfig` down."""
    on_path()
    from core.config import EvalConfig

    return reachable_models(EvalConfig)


def config_markdown() -> str:
    from core.config import EvalConfig

    return model_tables(EvalConfig)


# ---------------------------------------------------------------------------------------------- run files


def rollout_columns_markdown() -> str:
    """The rollout parquet's columns: the Arrow schema derived from `core.schema.RolloutRecord`."""
    from core.schema import COLUMN_DOCS, JSON_COLUMNS, ROLLOUT_SCHEMA, ROLLOUT_SCHEMA_VERSION

    rows = []
    for field in ROLLOUT_SCHEMA:
        kind = str(field.type).replace("timestamp[ms, tz=UTC]", "timestamp (ms, UTC)").replace("bool", "bool")
        kind = {"double": "double", "string": "string"}.get(kind, kind)
        if field.name in JSON_COLUMNS:
            kind += " (JSON)"
        rows.append([f"`{field.name}`", kind, "yes" if field.nullable else "no", cell(COLUMN_DOCS[field.name])])
    note = f"Schema version {ROLLOUT_SCHEMA_VERSION} (`core.schema.ROLLOUT_SCHEMA_VERSION`).\n\n"
    return note + table(["column", "type", "null", "meaning"], rows) + "\n"


def metrics_json_markdown() -> str:
    """metrics.json: `core.record.RunRecord` and every model under it."""
    problems = record_notes_problems()
    if problems:
        raise ValueError("docs/_hooks/record_notes.py: " + "; ".join(problems))
    from core.metrics_doc import METRICS_SCHEMA_VERSION
    from core.record import RunRecord

    note = f"Schema version {METRICS_SCHEMA_VERSION} (`core.metrics_doc.METRICS_SCHEMA_VERSION`).\n\n"
    return note + model_tables(RunRecord, defaults=False, level=4)


def index_entry_markdown() -> str:
    """An entry of the run index (`<store>/index/entries/<run_id>.json`, gathered into index.json)."""
    from core.record import IndexEntry

    return model_tables(IndexEntry, defaults=False, level=3)
