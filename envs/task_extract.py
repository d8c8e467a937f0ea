"""Answer extraction for declarative tasks: the extractor kinds a task file names, and what each finds.

One extractor or a list, tried in order until one finds something (lm-eval's filters, first match wins): a
regex (lm-eval's regex filter, with its group and match selection), the last number, the last `\\boxed{}`, a
field of the last JSON object, a multiple-choice letter, the whole text, or a program's code block. Each kind is
one model beside what it does, registered under `evalflow.extractors` in pyproject.toml like a plugin's
(envs.task_kinds); envs.task_spec assembles them into a task file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Annotated, Any, Literal

import regex
from pydantic import AfterValidator, BeforeValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from envs.code import extract_code
from envs.extract import last_boxed, normalize_answer
from envs.task_kinds import Extractor, ExtractorKind, NonEmpty

_LAST_NUMBER_RE = re.compile(r"-?\$?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|-?\.\d+")


def _check_regex(pattern: str) -> str:
    try:
        re.compile(pattern)
        regex.compile(pattern, flags=regex.VERSION0)
    except (re.error, regex.error) as e:
        raise ValueError(f"bad regex {pattern!r}: {e}") from None
    return pattern


def kind_shorthand(value: Any) -> Any:
    """`boxed` is short for `{kind: boxed}` (extractors and scorers alike)."""
    return {"kind": value} if isinstance(value, str) else value


def as_list(value: Any) -> Any:
    """One item (a string or a mapping) is short for a list of it."""
    return [value] if isinstance(value, str | Mapping) else value


def _as_extractors(value: Any) -> Any:
    return None if value is None else [kind_shorthand(v) for v in as_list(value)]


Regex = Annotated[str, AfterValidator(_check_regex)]
Letters = Annotated[str, Field(pattern=r"^[A-Z]{2,26}$")]


class RegexExtractor(ExtractorKind):
    """lm-eval's regex filter: the `select`ed match's `group` ("first_matched": its first group that matched)."""

    kind: Literal["regex"]
    pattern: Regex
    group: Annotated[int, Field(ge=0)] | Literal["first_matched"] | None = None  # default 1 (0 without groups)
    select: Literal["first", "last"] = "first"

    @model_validator(mode="after")
    def _group(self) -> RegexExtractor:
        groups = re.compile(self.pattern).groups
        if self.group is None:
            self.group = 1 if groups else 0
        elif isinstance(self.group, int) and self.group > groups:
            message = f"the pattern has {groups} group(s), not {self.group}"
            raise PydanticCustomError("task", "{message}", {"message": message, "at": "group"})
        return self

    def find(self, text: str, letters: str) -> str | None:
        return regex_find(self.pattern, self.group, self.select, text)


class LastNumberExtractor(ExtractorKind):
    """The last number in the text (`-1,234.5`, `$18`, `.5`), without `$` and thousands separators."""

    kind: Literal["last_number"]

    def find(self, text: str, letters: str) -> str | None:
        return last_number(text)


class BoxedExtractor(ExtractorKind):
    """The content of the last `\\boxed{}` (nested braces kept)."""

    kind: Literal["boxed"]

    def find(self, text: str, letters: str) -> str | None:
        return last_boxed(text)


class JsonFieldExtractor(ExtractorKind):
    """A dotted key of the last JSON object in the text (a string as it is, anything else as JSON)."""

    kind: Literal["json_field"]
    key: NonEmpty  # dotted: `answer`, `result.value`, `items.0`

    def find(self, text: str, letters: str) -> str | None:
        return json_field(text, self.key)


class ChoiceLetterExtractor(ExtractorKind):
    """The multiple-choice letter the text gives: "The answer is (B)", "Answer: C", a lone "D", "(A)"."""

    kind: Literal["choice_letter"]
    letters: Letters | None = None  # default: the task's choices' letters, else ABCD

    def find(self, text: str, letters: str) -> str | None:
        return choice_letter(text, self.letters or letters)


class WholeExtractor(ExtractorKind):
    """The whole answer text, stripped."""

    kind: Literal["whole"]

    def find(self, text: str, letters: str) -> str | None:
        return text.strip()


class CodeExtractor(ExtractorKind):
    """A program: the first ```python block, else the whole text (envs.code.extract_code)."""

    kind: Literal["code"]  # the first ```python block, else the text (envs.code.extract_code)

    def find(self, text: str, letters: str) -> str | None:
        return extract_code(text)[0]


Extractors = Annotated[list[Extractor], BeforeValidator(_as_extractors), Field(min_length=1)]


def extract(extractors: Sequence[ExtractorKind], text: str, letters: str) -> str | None:
    """What the first extractor that finds anything finds (after its `normalize`); None: none found an answer.

    `letters`: the task's choice letters, for a choice_letter extractor that names none.
    """
    for ex in extractors:
        found = ex.find(text, letters)
        if found is not None and ex.normalize == "number":
            found = normalize_answer(found)
        if found:
            return found
    return None


# A task's own regexes run with the `regex` engine (re's syntax and matching: its VERSION0) under a time limit: a
# pattern that backtracks catastrophically on some completion fails that rollout instead of hanging the run.
REGEX_TIMEOUT_S = 2.0


@lru_cache(maxsize=1024)
def compiled_regex(pattern: str) -> regex.Pattern[str]:
    return regex.compile(pattern, flags=regex.VERSION0)


def finditer(pattern: str, text: str) -> list[regex.Match[str]]:
    """Every non-overlapping match of a task's regex; TimeoutError past REGEX_TIMEOUT_S."""
    try:
        return list(compiled_regex(pattern).finditer(text, timeout=REGEX_TIMEOUT_S))
    except TimeoutError:
        raise _too_slow(pattern, text) from None


def remove_matches(pattern: str, text: str) -> str:
    """`text` without the matches of a task's regex (lm-eval's regexes_to_ignore); TimeoutError as finditer."""
    try:
        return compiled_regex(pattern).sub("", text, timeout=REGEX_TIMEOUT_S)
    except TimeoutError:
        raise _too_slow(pattern, text) from None


def _too_slow(pattern: str, text: str) -> TimeoutError:
    return TimeoutError(f"regex {pattern!r} ran over {REGEX_TIMEOUT_S:g} s on a {len(text)}-character text")


def regex_find(pattern: str, group: int | str | None, select: str, text: str) -> str | None:
    """lm-eval's RegexFilter: all non-overlapping matches, the first or last, then its group, stripped.

    `group` "first_matched" takes the match's first non-empty group, as lm-eval does for a pattern with several
    (its `findall` gives a tuple); None when nothing matched (lm-eval's fallback).
    """
    matches = finditer(pattern, text)
    if not matches:
        return None
    m = matches[0] if select == "first" else matches[-1]
    if group == "first_matched":
        value = next((g for g in m.groups() if g), None) if m.re.groups else m.group(0)
    else:
        value = m.group(group if isinstance(group, int) else 0)
    return None if value is None else value.strip()


def last_number(text: str) -> str | None:
    """The last number in the text (`-1,234.5`, `$18`, `.5`), without `$` and thousands separators."""
    matches = _LAST_NUMBER_RE.findall(text)
    return matches[-1].replace("$", "").replace(",", "") if matches else None


def json_field(text: str, key: str) -> str | None:
    """A dotted key of the last JSON object in the text (a string as it is, anything else as JSON)."""
    decoder, last, i = json.JSONDecoder(), None, text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            last = obj
        i = text.find("{", end)
    value: Any = last
    for part in key.split(".") if last is not None else ():
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


@lru_cache(maxsize=64)
def _choice_patterns(letters: str) -> tuple[tuple[re.Pattern[str], bool], ...]:
    """(pattern, take the last match) in the order tried; the letter is group 1."""
    c = f"[{letters}]"
    return (
        (re.compile(rf"^\W*({c})\W*$"), False),  # only a letter: "B", "(B)", "**B.**"
        (re.compile(rf"(?i:answer)\s*(?:is|:)?\s*:?\s*(?i:option\s+|choice\s+)?[*(\[]*({c})(?![A-Za-z0-9])"), True),
        (re.compile(rf"^\s*[(\[]?({c})[.):\]](?:\s|$)"), False),  # opens with "B. ..." or "B) ..."
        (re.compile(rf"\(({c})\)"), True),  # "(B)"
        # a lone capital: "I pick B." (not an article: "A cat", "Option A is ...")
        (re.compile(rf"(?<![A-Za-z0-9'])({c})(?=[.,;:!?)\]*]*(?:\s|$))(?!\W*\s+[a-z])"), True),
    )


def choice_letter(text: str, letters: str) -> str | None:
    """The multiple-choice letter a completion gives: "The answer is (B)", "Answer: C", a lone "D", "(A)"."""
    for pattern, last in _choice_patterns(letters):
        matches = pattern.findall(text)
        if matches:
            return matches[-1] if last else matches[0]
    return None
