"""Reading documents an older evalflow wrote: keep the keys today's models declare, drop the ones a later
schema version retired. Only ever applied to documents of an older version; today's are read strictly
(an unknown key in them is a bug, and fails validation)."""

from __future__ import annotations

import types
import typing
from typing import Any, cast

from pydantic import BaseModel


def _models(annotation: Any) -> list[tuple[str, type[BaseModel]]]:
    """The models a field holds, and how: "one" (a model or an optional one), "list", or "dict" (values)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("one", annotation)]
    if origin in (typing.Union, types.UnionType):
        return [found for arg in args for found in _models(arg)]
    if origin is list and args:
        return [("list", m) for _, m in _models(args[0])]
    if origin is dict and len(args) == 2:
        return [("dict", m) for how, m in _models(args[1]) if how == "one"] + [
            ("dict-dict", m) for how, m in _models(args[1]) if how == "dict"
        ]
    return []


def strip_unknown(model: type[BaseModel], data: Any) -> Any:
    """`data` with every key `model` (and the models nested in it) does not declare removed."""
    if not isinstance(data, dict):
        return data
    fields = model.model_fields
    out: dict[str, Any] = {}
    for key, value in cast(dict[str, Any], data).items():
        field = fields.get(key)
        if field is None:
            continue
        for how, sub in _models(field.annotation):
            if how == "one" and isinstance(value, dict):
                value = strip_unknown(sub, value)
            elif how == "list" and isinstance(value, list):
                value = [strip_unknown(sub, v) for v in cast(list[Any], value)]
            elif how == "dict" and isinstance(value, dict):
                value = {k: strip_unknown(sub, v) for k, v in cast(dict[str, Any], value).items()}
            elif how == "dict-dict" and isinstance(value, dict):
                value = {k: {kk: strip_unknown(sub, vv) for kk, vv in cast(dict[str, Any], v).items()}
                         if isinstance(v, dict) else v
                         for k, v in cast(dict[str, Any], value).items()}  # fmt: skip
        out[key] = value
    return out


def env_metrics_of_schema_2(data: dict[str, Any]) -> dict[str, Any]:
    """Version-2 benchmarks kept every boolean info key in `info_rates` (Wilson CIs in `ci.info_rates`) and
    categorical ones in `info_outcomes`: read them as env metrics, so a comparison with an old baseline still
    matches them by key."""
    if "env_metrics" in data:
        return data
    rates: dict[str, Any] = data.get("info_rates") or {}
    outcomes: dict[str, dict[str, int]] = data.get("info_outcomes") or {}
    ci: dict[str, Any] = data.get("ci") or {}
    cis: dict[str, dict[str, Any] | None] = ci.get("info_rates") or {}
    rollouts = data.get("n_rollouts", 0)
    metrics: list[dict[str, Any]] = [
        {"key": k, "label": k, "kind": "rate", "value": v, "n": (cis.get(k) or {}).get("n", rollouts), "ci": cis.get(k)}
        for k, v in rates.items()
    ]
    metrics += [
        {"key": k, "label": k, "kind": "counts", "n": sum(c.values()), "counts": c} for k, c in outcomes.items()
    ]
    return {**data, "env_metrics": metrics}
