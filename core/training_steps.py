"""`model.steps`: which checkpoints of a training run to evaluate, parsed where the config is validated (so a
bad value fails with the config); tasks.checkpoints.training_run lists the steps and selects them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

STEPS_FORMS = (
    "'all', 'latest', 'every:K' (the ready steps whose number is a multiple of K, K > 0) "
    "or a list of step numbers >= 0 (e.g. [100, 200] or '100,200')"
)


@dataclass(frozen=True)
class StepsSpec:
    """Which ready steps `model.steps` asks for (see `parse_steps`)."""

    kind: Literal["all", "latest", "list", "every"]
    steps: tuple[int, ...] = ()  # kind "list": the step numbers asked for
    every: int = 0  # kind "every": K


def _bad_steps(value: object) -> ValueError:
    return ValueError(f"{value!r} is not valid; use {STEPS_FORMS}")  # the field is named by whoever reports it


def _step_numbers(items: list[Any], value: object) -> tuple[int, ...]:
    numbers: list[int] = []
    for item in items:
        if isinstance(item, str) and item.strip().isdigit():
            item = int(item.strip())
        if not isinstance(item, int) or isinstance(item, bool) or item < 0:
            raise _bad_steps(value)
        numbers.append(item)
    if not numbers:
        raise _bad_steps(value)
    return tuple(sorted(set(numbers)))


def parse_steps(value: object) -> StepsSpec:
    """`model.steps` as a StepsSpec; None means "all" (every checkpoint, as it lands).

    `every:K` selects the ready steps whose NUMBER is a multiple of K (`every:100` on a run saving
    every 50 steps evaluates 100, 200, ...), not every K-th ready step: a step's selection then never
    changes as the run grows or as an earlier step becomes ready late. A list (or "100,200", or one
    number) names step numbers; one that does not exist yet is simply not selected yet. Anything
    else (a negative number, K <= 0, an unknown word) raises ValueError naming model.steps."""
    if value is None:
        return StepsSpec("all")
    if isinstance(value, bool):
        raise _bad_steps(value)
    if isinstance(value, int):
        return StepsSpec("list", _step_numbers([value], value))
    if isinstance(value, list | tuple):
        items = cast(Sequence[object], value)
        return StepsSpec("list", _step_numbers(list(items), items))
    if not isinstance(value, str):
        raise _bad_steps(value)
    word = value.strip().lower()
    if word == "all":
        return StepsSpec("all")
    if word == "latest":
        return StepsSpec("latest")
    if word.startswith("every:"):
        k = word.removeprefix("every:").strip()
        if not k.isdigit() or int(k) <= 0:
            raise _bad_steps(value)
        return StepsSpec("every", every=int(k))
    return StepsSpec("list", _step_numbers(word.strip("[]").split(","), value))


# What a training run's step changes in a run's config (and what only says how to watch): left out of the key
# that tells whether a step was already evaluated with this config.
_PER_STEP = ("source", "served_name", "steps", "step", "training_run", "step_order", "settle_s", "step_attempts")


def config_key(config: dict[str, Any]) -> str:
    """A run config's identity apart from which checkpoint of a training run it evaluates (the model's source,
    served name and step, the watching settings), its run name and its comparison gate (which judges a run, not
    how it is evaluated): two runs of one step with equal keys evaluated it the same way (the redacted config a
    run records gives the same key as the one it ran)."""
    data = {k: v for k, v in config.items() if k not in ("run_name", "gate")}
    server = data.get("server")
    if isinstance(server, dict):  # how a server takes a checkpoint (swapped or started), not what it computes
        data["server"] = {k: v for k, v in cast(dict[str, Any], server).items() if k != "swap_weights"}
    model = data.get("model")
    if isinstance(model, dict):
        data["model"] = {k: v for k, v in cast(dict[str, Any], model).items() if k not in _PER_STEP}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]
