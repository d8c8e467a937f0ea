"""What `evalflow envs` shows: the registered environments (`describe`), the task files' extractor and scorer
kinds (`describe_kinds`), and a check of one environment against its data (`check`): every row validated, the
first prompts rendered, and each reference answer scored as if it were the completion, so a task author sees a
broken template or extractor before any server starts.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_jsonable_python

from envs.base import Env, MultiTurnEnv, Score, SingleTurnEnv
from envs.datasets import load_rows
from envs.registry import env_class, get_env, registered_names, registered_origin
from envs.task_kinds import EXTRACTOR_GROUP, SCORER_GROUP, KindError, ScorerKind, kind_names, kind_origin, load_kind


@dataclass(frozen=True)
class EnvSummary:
    """One environment as `evalflow envs list` prints it."""

    name: str
    origin: str
    version: str
    kind: str  # single-turn | multi-turn
    options: dict[str, str]  # option -> its default, as text
    metrics: list[str]


def kind_of(cls: type[Env]) -> str:
    return "multi-turn" if issubclass(cls, MultiTurnEnv) else "single-turn"


def options_of(cls: type[Env]) -> dict[str, str]:
    params = inspect.signature(cls).parameters.values()
    return {
        p.name: "required" if p.default is inspect.Parameter.empty else repr(p.default)
        for p in params
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def summary(cls: type[Env], origin: str) -> EnvSummary:
    return EnvSummary(
        cls.name, origin, cls.version, kind_of(cls), options_of(cls), [m.key for m in cls.metrics]
    )  # fmt: skip


@dataclass(frozen=True)
class KindSummary:
    """One extractor or scorer kind of declarative tasks as `evalflow envs kinds` prints it."""

    group: str  # extractor | scorer
    name: str
    origin: str
    summary: str  # the first line of the class's docstring
    options: dict[str, str]  # option -> its default, as text ("required" when it has none)
    flags: list[str]  # asynchronous, main thread, runs code, no reference


def _kind_summary(group: str, name: str) -> KindSummary:
    cls = load_kind(group, name)
    doc = (cls.__doc__ or "").strip().splitlines()
    options = {
        n: "required" if f.is_required() else json.dumps(to_jsonable_python(f.get_default(call_default_factory=True)))
        for n, f in cls.model_fields.items()
        if n != "kind"
    }
    flags: list[str] = []
    if issubclass(cls, ScorerKind):
        flags += ["asynchronous"] if cls.asynchronous else []
        flags += ["runs code"] if cls.runs_code else []
        flags += [] if cls.uses_reference else ["no reference"]
        flags += [f"default extractor: {cls.default_extractor}"]
    noun = "scorer" if group == SCORER_GROUP else "extractor"
    return KindSummary(noun, name, kind_origin(group, name), doc[0] if doc else "", options, flags)


def describe_kinds() -> tuple[list[KindSummary], dict[str, str]]:
    """Every registered extractor and scorer kind, and for each one that cannot be loaded here, why (one line)."""
    found, broken = [], {}
    for group in (EXTRACTOR_GROUP, SCORER_GROUP):
        for name in kind_names(group):
            try:
                found.append(_kind_summary(group, name))
            except KindError as exc:
                broken[name] = str(exc)
    return found, broken


def describe() -> tuple[list[EnvSummary], dict[str, str]]:
    """Every registered environment, and for each one that cannot be loaded here, why (one line)."""
    found, broken = [], {}
    for name in registered_names():
        try:
            found.append(summary(env_class(name), registered_origin(name)))
        except ValueError as exc:
            broken[name] = str(exc)
    return found, broken


@dataclass
class RowCheck:
    """One row of the check: its id, the prompt as sent (chat turns or text), the reference, and the
    environment's verdict on the reference answer as the completion (None for a multi-turn environment)."""

    prompt_id: str
    prompt: str
    reference: str
    parsed_answer: str | None = None
    reward: float | None = None
    success: bool | None = None
    error: str | None = None


@dataclass
class CheckResult:
    env: EnvSummary
    source: str
    rows: int
    checked: list[RowCheck] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)  # a multi-turn environment's tool names

    @property
    def scored(self) -> int:
        return sum(1 for c in self.checked if c.reward is not None)

    @property
    def correct(self) -> int:
        return sum(1 for c in self.checked if c.success)


def _prompt_text(env: Env, row: dict[str, Any]) -> str:
    if isinstance(env, MultiTurnEnv):
        messages = env.reset(row).messages
    else:
        assert isinstance(env, SingleTurnEnv)
        text = env.prompt(row)
        if text is not None:
            return text
        messages = env.messages(row)
    return "\n".join(f"[{m.get('role')}] {m.get('content')}" for m in messages)


def _score(env: SingleTurnEnv, row: dict[str, Any], completion: str) -> Score:
    return asyncio.run(env.ascore(row, completion))


def check(
    ref: str | Mapping[str, Any],
    dataset: str | None = None,
    limit: int | None = 5,
    options: dict[str, Any] | None = None,
) -> CheckResult:
    """Load and validate every row (a malformed one raises DatasetError naming file and line), then render and
    score the first `limit` rows (all with None). Scoring errors are reported per row, not raised."""
    env = get_env(ref, **(options or {}))
    cls = type(env)
    source = dataset or env.default_source()
    rows = load_rows(source, env)
    origin = ref if isinstance(ref, str) else "inline task"
    result = CheckResult(summary(cls, origin), source, len(rows))
    if isinstance(env, MultiTurnEnv):
        result.tools = [t.get("function", {}).get("name", "?") for t in env.tools() or []]
    for row in rows if limit is None else rows[:limit]:
        item = RowCheck(env.prompt_id(row), _prompt_text(env, row), str(env.reference(row)))
        if isinstance(env, SingleTurnEnv):
            try:
                score = _score(env, row, item.reference)
                item.parsed_answer, item.reward, item.success = score.parsed_answer, score.reward, score.success
            except Exception as exc:  # the author's scorer failing on its own reference: what they need to see
                item.error = f"{type(exc).__name__}: {exc}"
        result.checked.append(item)
    return result
