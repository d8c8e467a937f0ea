"""LLM judges as benchmarks see them: the judge a scorer asks, how its answers are read, and how n of them vote.

The judge itself (a model evalflow serves or reaches, its cache of answers) lives in tasks/judging; a benchmark
only asks `active_judge().ask(messages, sample)` for the judge's text, or uses `ask_judge` with a `Rubric`. The
judge is set for the judging phase of a run (`judging(judge)`); outside it there is none, and asking fails.

A judge's answer is read by a verdict spec: a `label` (one of the rubric's words, each pass or fail), a number on
a `scale` (pass at or above `pass_at`), or `json` (a field of the last JSON object in the text, itself a bool, a
number on the scale or a label). An answer that cannot be read is no verdict (counted as unparsed, never a pass).
n samples vote by `majority` of pass/fail (a tie fails) or by the `mean` score against `pass_at`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from envs.task_extract import Regex
from envs.task_kinds import TaskModel

MAX_TEXT_CHARS = 2000  # of each judge answer kept in the rollout's record
_NUMBER = r"-?\d+(?:\.\d+)?"


class JudgeFailed(Exception):
    """A judge request failed (the judge's server is down, timed out, refused): never a verdict, never cached.
    The rollout's score fails as a `judge` error, counted apart from the policy's failures."""


class Judge(ABC):
    """What a scorer asks: the judge's text for chat `messages`; `sample` numbers the independent answers to the
    same question (each its own seed), so n samples of a greedy judge at temperature 0 are still n asks."""

    fingerprint: str

    @abstractmethod
    async def ask(self, messages: list[dict[str, str]], sample: int = 0) -> str:
        """The judge's answer; raises JudgeFailed when it cannot be had."""


_active: list[Judge] = []


@contextlib.contextmanager
def judging(judge: Judge) -> Iterator[Judge]:
    """Make `judge` the one scorers ask while the block runs (the judging phase of a run)."""
    _active.append(judge)
    try:
        yield judge
    finally:
        _active.remove(judge)


def active_judge() -> Judge:
    """The judge of the running judging phase; JudgeFailed when there is none (scored outside one)."""
    if not _active:
        raise JudgeFailed("no judge is running: this benchmark is scored by a judge (set `judge:` in the run config)")
    return _active[-1]


class LabelVerdict(TaskModel):
    """The answer names one of `labels` (each true: pass, false: fail); the last one named counts."""

    kind: Literal["label"]
    labels: Annotated[dict[str, bool], Field(min_length=2)]
    pattern: Regex | None = None  # one group capturing the label; default: the last label named, as a word
    ignore_case: bool = True


class ScaleVerdict(TaskModel):
    """The answer gives a number from `min` to `max`; it passes at `pass_at` or above."""

    kind: Literal["scale"]
    min: float
    max: float
    pass_at: float
    pattern: Regex | None = None  # one group capturing the number; default: the last number in the answer

    @model_validator(mode="after")
    def _ordered(self) -> ScaleVerdict:
        if not self.min < self.max or not self.min <= self.pass_at <= self.max:
            raise ValueError(f"need min < max and pass_at within them (min {self.min}, max {self.max}, "
                             f"pass_at {self.pass_at})")  # fmt: skip
        return self


class JsonVerdict(TaskModel):
    """The last JSON object in the answer; its `field` is a bool, a number on the scale, or one of the labels."""

    kind: Literal["json"]
    field: Annotated[str, Field(min_length=1)]
    labels: dict[str, bool] | None = None
    min: float | None = None
    max: float | None = None
    pass_at: float | None = None

    @model_validator(mode="after")
    def _scale_whole(self) -> JsonVerdict:
        given = [v is not None for v in (self.min, self.max, self.pass_at)]
        if any(given) and not all(given):
            raise ValueError("a json verdict on a scale needs min, max and pass_at")
        return self


VerdictSpec = Annotated[LabelVerdict | ScaleVerdict | JsonVerdict, Field(discriminator="kind")]


@dataclass(frozen=True)
class Reading:
    """One judge answer read: its value (a label or a number), pass or fail, and its score in [0, 1]; all None
    when the answer could not be read."""

    value: str | float | bool | None
    passed: bool | None
    score: float | None


UNREAD = Reading(None, None, None)


def _label(found: str, labels: dict[str, bool], ignore_case: bool) -> Reading:
    for label, passed in labels.items():
        if found == label or (ignore_case and found.casefold() == label.casefold()):
            return Reading(label, passed, 1.0 if passed else 0.0)
    return UNREAD


def _on_scale(value: float, lo: float, hi: float, pass_at: float) -> Reading:
    if not lo <= value <= hi:
        return UNREAD
    return Reading(value, value >= pass_at, (value - lo) / (hi - lo))


def _last_json_object(text: str) -> dict[str, Any] | None:
    decoder = json.JSONDecoder()
    for start in reversed([m.start() for m in re.finditer(r"\{", text)]):
        try:
            obj, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def named_labels(text: str, labels: Iterable[str], ignore_case: bool = True) -> list[str]:
    """The labels `text` names as words, in order (a label inside a longer word, as `A` in `A-grade`, is none)."""
    words = "|".join(re.escape(label) for label in sorted(labels, key=len, reverse=True))
    return re.findall(rf"(?<![\w-])({words})(?![\w-])", text, re.IGNORECASE if ignore_case else 0)


def read_verdict(spec: LabelVerdict | ScaleVerdict | JsonVerdict, text: str) -> Reading:
    """What one judge answer says, by the verdict spec; UNREAD when it says nothing the spec can read."""
    if isinstance(spec, LabelVerdict):
        if spec.pattern is not None:
            found = [m.group(1) if m.groups() else m.group(0) for m in re.finditer(spec.pattern, text)]
        else:
            found = named_labels(text, spec.labels, spec.ignore_case)
        return _label(found[-1].strip(), spec.labels, spec.ignore_case) if found else UNREAD
    if isinstance(spec, ScaleVerdict):
        found = re.findall(spec.pattern or f"({_NUMBER})", text)
        if not found:
            return UNREAD
        try:
            return _on_scale(float(found[-1]), spec.min, spec.max, spec.pass_at)
        except ValueError:
            return UNREAD
    obj = _last_json_object(text)
    value = obj.get(spec.field) if obj is not None else None
    if isinstance(value, bool):
        return Reading(value, value, 1.0 if value else 0.0)
    if isinstance(value, int | float) and spec.min is not None and spec.max is not None and spec.pass_at is not None:
        return _on_scale(float(value), spec.min, spec.max, spec.pass_at)
    if isinstance(value, str) and spec.labels:
        return _label(value.strip(), spec.labels, True)
    return UNREAD


@dataclass(frozen=True)
class Vote:
    """n judge answers' verdict: pass or fail, the mean score of those read, how many were read."""

    passed: bool
    score: float | None
    read: int
    value: str | float | bool | None  # the most common value read (labels), or the mean (numbers)


def vote(readings: list[Reading], how: Literal["majority", "mean"], spec: LabelVerdict | ScaleVerdict | JsonVerdict
         ) -> Vote:  # fmt: skip
    """The samples' verdict: `majority` of pass over fail among those read (a tie fails), or the `mean` score
    passing at the scale's `pass_at` (labels: at 0.5). None read: no verdict, a fail."""
    read = [r for r in readings if r.passed is not None]
    if not read:
        return Vote(False, None, 0, None)
    scores = [r.score for r in read if r.score is not None]
    mean = sum(scores) / len(scores) if scores else None
    values = [r.value for r in read]
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    value: str | float | bool | None = (
        sum(float(v) for v in values if isinstance(v, int | float)) / len(values)
        if numeric
        else max(set(values), key=lambda v: (values.count(v), str(v)))
    )
    if how == "majority":
        passes = sum(bool(r.passed) for r in read)
        return Vote(passes > len(read) - passes, mean, len(read), value)
    lo, hi, at = getattr(spec, "min", None), getattr(spec, "max", None), getattr(spec, "pass_at", None)
    threshold = (at - lo) / (hi - lo) if lo is not None and hi is not None and at is not None else 0.5
    return Vote(mean is not None and mean >= threshold, mean, len(read), value)


async def ask_all(judge: Judge, messages: list[dict[str, str]], samples: int) -> list[str]:
    """`samples` answers of the judge to the same question, asked at once."""
    return list(await asyncio.gather(*(judge.ask(messages, i) for i in range(samples))))
