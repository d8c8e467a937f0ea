"""The extractor and scorer kinds of declarative tasks: what a kind is, and the registries that find one by name.

A kind is one small pydantic model. Its `kind` literal is its name, its fields are its options (validated by
the model itself: an unknown option or a bad value is a `file:line: field: message` error of the task file),
and one method does its work: an extractor's `find` returns the answer it finds in the text, a scorer's
`verdict` (or `averdict`, when it awaits a sandbox or a model) judges an extracted answer. evalflow's own kinds
(envs.task_extract, envs.task_score) register through the entry-point groups below in pyproject.toml, exactly
as a plugin's do, so adding one is one file and one line of its package's metadata:

    [project.entry-points."evalflow.scorers"]
    within_percent = "my_package.scorers:WithinPercent"

A task then names it (`scorer: {kind: within_percent, percent: 5}`); `evalflow envs kinds` lists them all.
"""

from __future__ import annotations

import difflib
from abc import abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, SerializeAsAny
from pydantic_core import PydanticCustomError

from errors import EvalflowError

EXTRACTOR_GROUP = "evalflow.extractors"
SCORER_GROUP = "evalflow.scorers"


class KindError(EvalflowError, ValueError):
    """A registered kind cannot be loaded or is no kind; the message names the kind and its entry point."""

    kind = "config"


class TaskModel(BaseModel):
    """Every part of a task file: unknown fields are errors (a typo must not pass as a default)."""

    model_config = ConfigDict(extra="forbid")


NonEmpty = Annotated[str, Field(min_length=1)]


class ExtractorKind(TaskModel):
    """An answer extractor: `find` returns what it finds in the answer text, or None (the next one is tried)."""

    kind: Any  # each kind narrows it to its own name: `kind: Literal["boxed"]`
    # "number": lm-eval's cleanup of the found text (drop `,` and `$`, then one trailing `.`); empty: not found.
    normalize: Literal["none", "number"] = "none"

    @abstractmethod
    def find(self, text: str, letters: str) -> str | None:
        """The answer in `text`; `letters` are the task's multiple-choice letters (for kinds that read them)."""


@dataclass(frozen=True)
class Context:
    """What a scorer may read besides the extracted answer."""

    row: dict[str, Any]
    reference: str  # the metric's reference ("" for kinds with uses_reference False)
    choices: list[Any] | None  # the row's multiple-choice options, when the task has `choices.field`
    letters: str  # the task's choice letters
    allow_unsandboxed: bool = False  # the task's option, for kinds that run programs


@dataclass(frozen=True)
class Verdict:
    """An asynchronous scorer's answer: right or not, and an outcome label of its own (kept in `info.outcomes`)."""

    correct: bool
    outcome: str | None = None
    details: dict[str, Any] | None = None  # what the rollout's record keeps of it (a judge's answers: `info.judge`)


class ScorerKind(TaskModel):
    """A scorer: `verdict` judges an extracted answer (None: no extractor found one) against the reference.

    A kind that awaits something (a sandbox, a model) sets `asynchronous` and defines `averdict` instead; one that
    calls math-verify (whose timeout is SIGALRM) says so in `needs_main_thread`, and the task scores it in a
    worker process's main thread.
    """

    kind: Any  # each kind narrows it to its own name: `kind: Literal["numeric"]`
    # The extractor a metric with this scorer gets when neither the metric nor the task names one.
    default_extractor: ClassVar[str] = "whole"
    asynchronous: ClassVar[bool] = False
    # Whether the metric compares with a reference (False: the row's own data judges, e.g. its tests).
    uses_reference: ClassVar[bool] = True
    # Whether the kind runs the model's programs (the task then accepts the `allow_unsandboxed` option).
    runs_code: ClassVar[bool] = False
    # Whether the kind asks the run's judge model (envs.judge): its batches are judged after collection.
    uses_judge: ClassVar[bool] = False

    def needs_main_thread(self) -> bool:
        return False

    def verdict(self, answer: str | None, context: Context) -> bool:
        raise NotImplementedError(f"scorer kind {self.kind!r} is asynchronous: await averdict()")

    async def averdict(self, answer: str | None, context: Context) -> Verdict:
        return Verdict(self.verdict(answer, context))

    def check_row(self, row: dict[str, Any], where: str) -> None:
        """Raise DatasetError(f"{where}: ...") when a row lacks what this kind reads from it (default: nothing)."""


@cache
def _entry_points(group: str) -> dict[str, list[EntryPoint]]:
    found: dict[str, list[EntryPoint]] = {}
    for ep in entry_points(group=group):
        if all(ep.value != other.value for other in found.get(ep.name, [])):  # one package seen twice on sys.path
            found.setdefault(ep.name, []).append(ep)
    return found


def kind_names(group: str) -> list[str]:
    """The registered kinds of a group, by name (nothing is imported)."""
    return sorted(_entry_points(group))


def kind_origin(group: str, name: str) -> str:
    """The distribution(s) that register a kind, with their `module:Class` (evalflow for the built-ins)."""
    eps = _entry_points(group).get(name, [])
    return ", ".join(sorted(f"{ep.dist.name if ep.dist else '?'} ({ep.value})" for ep in eps)) or "?"


def clear_cache() -> None:
    """Forget the entry points read so far (a test or a session that installs a plugin in-process)."""
    _entry_points.cache_clear()
    load_kind.cache_clear()


def _noun(group: str) -> str:
    return "scorer" if group == SCORER_GROUP else "extractor"


@cache
def load_kind(group: str, name: str) -> type[TaskModel]:
    """The class registered under `name`; KindError (one line) when it cannot be used."""
    base = ScorerKind if group == SCORER_GROUP else ExtractorKind
    eps = _entry_points(group).get(name, [])
    what = f"{_noun(group)} kind {name!r}"
    if len(eps) != 1:
        raise KindError(f"{what} is registered by {len(eps)} packages: {kind_origin(group, name)}; uninstall one")
    try:
        cls = eps[0].load()
    except Exception as exc:  # a plugin that fails to import
        raise KindError(f"{what} ({eps[0].value}) cannot be imported: {type(exc).__name__}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise KindError(f"{what} ({eps[0].value}) is not a subclass of envs.task_kinds.{base.__name__}")
    field = cls.model_fields["kind"].annotation
    if getattr(field, "__args__", None) != (name,):
        raise KindError(f"{what} ({eps[0].value}) must declare `kind: Literal[{name!r}]`")
    return cls


def _validator(group: str) -> Callable[[Any], Any]:
    base = ScorerKind if group == SCORER_GROUP else ExtractorKind

    def validate(value: Any) -> Any:
        if isinstance(value, base):
            return value
        value = {"kind": value} if isinstance(value, str) else value
        if not isinstance(value, Mapping):
            raise PydanticCustomError("kind", "{message}", {"message": f"a {_noun(group)} is a kind name or a mapping"})
        name = value.get("kind")
        if name is None:
            raise PydanticCustomError("kind", "{message}", {"message": "missing 'kind'"})
        known = kind_names(group)
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            message = f"unknown {_noun(group)} {name!r}{hint}; known: {', '.join(known)}"
            raise PydanticCustomError("kind", "{message}", {"message": message, "at": "kind"})
        try:
            cls = load_kind(group, str(name))
        except KindError as exc:
            raise PydanticCustomError("kind", "{message}", {"message": str(exc), "at": "kind"}) from None
        return cls.model_validate(dict(value))  # its errors keep their places inside the kind (a ValidationError)

    return validate


# The field types a task file's `extract` items and `scorer`s have: any registered kind, validated by its model.
Extractor = Annotated[SerializeAsAny[ExtractorKind], PlainValidator(_validator(EXTRACTOR_GROUP))]
Scorer = Annotated[SerializeAsAny[ScorerKind], PlainValidator(_validator(SCORER_GROUP))]


def kind_fields() -> list[str]:
    """Every option name of the registered kinds that are loaded (for "did you mean" on an unknown field)."""
    names: set[str] = set()
    for group in (EXTRACTOR_GROUP, SCORER_GROUP):
        for name in kind_names(group):
            try:
                names |= set(load_kind(group, name).model_fields)
            except KindError:
                continue
    return sorted(names - {"kind"})
