"""Scorers for declarative tasks: the scorer kinds a task file names, and each one's verdict on an answer.

Each compares an extracted answer with the row's reference: lm-eval's exact_match (its options, applied to
both sides as lm-eval does), numbers within a tolerance (optionally math-verify for the rest, as the gsm8k env
does), math-verify equivalence, a multiple-choice letter, a substring, or the row's tests run against the
program in the sandbox (asynchronous, like envs.code). Each kind is one model (envs.task_kinds.ScorerKind),
registered under `evalflow.scorers` in pyproject.toml like a plugin's.
"""

from __future__ import annotations

import builtins
import string
import sys
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field

from envs.base import DatasetError
from envs.code import remote_names
from envs.extract import answers_equal, to_number
from envs.task_extract import Regex, remove_matches
from envs.task_kinds import Context, NonEmpty, ScorerKind, TaskModel, Verdict
from sandbox.runner import SandboxResult, TestSpec, run_tests

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_DIGITS = str.maketrans("", "", string.digits)


class ExactMatchScorer(ScorerKind):
    """lm-eval's exact_match: `regexes_to_ignore` removed from both sides in order, then case, punctuation, digits."""

    kind: Literal["exact_match"]
    ignore_case: bool = False
    ignore_punctuation: bool = False
    ignore_numbers: bool = False
    regexes_to_ignore: list[Regex] = Field(default_factory=list)
    fallback: str | None = "[invalid]"  # compared when nothing was extracted (lm-eval's filter fallback)

    def verdict(self, answer: str | None, context: Context) -> bool:
        answer = self.fallback if answer is None else answer
        return answer is not None and lm_eval_clean(answer, self) == lm_eval_clean(context.reference, self)


class Tolerance(TaskModel):
    absolute: Annotated[float, Field(ge=0)] = 0.0
    relative: Annotated[float, Field(ge=0)] = 0.0  # of the reference's magnitude


def _tolerance(value: Any) -> Any:
    return {"absolute": value} if isinstance(value, int | float) and not isinstance(value, bool) else value


class NumericScorer(ScorerKind):
    """Numbers equal within a tolerance (absolute, or relative to the reference); math-verify for the rest if set."""

    kind: Literal["numeric"]
    tolerance: Annotated[Tolerance, BeforeValidator(_tolerance)] = Tolerance()  # a bare number: absolute
    # Non-numbers: equal strings or math-verify equivalence (envs.extract.answers_equal, as gsm8k), not wrong.
    math_verify: bool = False
    default_extractor: ClassVar[str] = "last_number"

    def needs_main_thread(self) -> bool:
        return self.math_verify

    def verdict(self, answer: str | None, context: Context) -> bool:
        if answer is None:
            return False
        close = numbers_close(answer, context.reference, self.tolerance)
        return close if close is not None else self.math_verify and answers_equal(answer, context.reference)


class MathVerifyScorer(ScorerKind):
    """math-verify's equivalence of the answer and the reference (`1/2` and `0.5`, `\\frac{1}{2}`)."""

    kind: Literal["math_verify"]
    default_extractor: ClassVar[str] = "boxed"

    def needs_main_thread(self) -> bool:
        return True

    def verdict(self, answer: str | None, context: Context) -> bool:
        return answer is not None and answers_equal(answer, context.reference)


class MultipleChoiceScorer(ScorerKind):
    """The answer's letter (or a choice's text) is the reference's (a letter, a choice's text or its 0-based index)."""

    kind: Literal["multiple_choice"]
    default_extractor: ClassVar[str] = "choice_letter"

    def verdict(self, answer: str | None, context: Context) -> bool:
        return multiple_choice(answer, context.reference, context.choices, context.letters)


class ContainsScorer(ScorerKind):
    """The reference appears in the answer (optionally ignoring case)."""

    kind: Literal["contains"]
    ignore_case: bool = False

    def verdict(self, answer: str | None, context: Context) -> bool:
        if answer is None:
            return False
        ref = context.reference
        return (ref.casefold() in answer.casefold()) if self.ignore_case else ref in answer


class CodeTestsScorer(ScorerKind):
    """The row's tests run against the extracted program in the sandbox (a separate judge process)."""

    kind: Literal["code_tests"]
    tests_field: NonEmpty = "test_list"  # a list of assert statements, or one string of test code
    setup_field: str | None = None  # trusted code run before the tests (and before the program)
    entry_point_field: str | None = None  # the function the tests call (else: the names they use it defines)
    timeout_s: Annotated[float, Field(gt=0)] = 5.0
    default_extractor: ClassVar[str] = "code"
    asynchronous: ClassVar[bool] = True
    uses_reference: ClassVar[bool] = False
    runs_code: ClassVar[bool] = True

    def check_row(self, row: dict[str, Any], where: str) -> None:
        row_tests(self, row, where)

    async def averdict(self, answer: str | None, context: Context) -> Verdict:
        result = await judge_code(self, answer, context.row, context.allow_unsandboxed)
        return Verdict(result is not None and result.passed, result.outcome if result is not None else "no_code")


def lm_eval_clean(text: str, scorer: ExactMatchScorer) -> str:
    """One side of lm-eval's exact_match (exact_match_hf_evaluate), as it transforms both."""
    for pattern in scorer.regexes_to_ignore:
        text = remove_matches(pattern, text)
    if scorer.ignore_case:
        text = text.lower()
    if scorer.ignore_punctuation:
        text = text.translate(_PUNCTUATION)
    if scorer.ignore_numbers:
        text = text.translate(_DIGITS)
    return text


def numbers_close(pred: str, ref: str, tolerance: Tolerance) -> bool | None:
    """Whether two numbers are within the tolerance; None when either is no plain number."""
    p, r = to_number(pred), to_number(ref)
    if p is None or r is None:
        return None
    allowed = max(Decimal(str(tolerance.absolute)), Decimal(str(tolerance.relative)) * abs(r))
    return abs(p - r) <= allowed


def reference_letter(ref: str, choices: list[Any] | None, letters: str) -> str | None:
    """The reference as a letter: a letter itself, the text of one of the choices, or a 0-based index."""
    ref = ref.strip()
    if len(ref) == 1 and ref.upper() in letters:
        return ref.upper()
    texts = [str(c).strip().casefold() for c in choices or []]
    if ref.casefold() in texts:
        return letters[texts.index(ref.casefold())]
    if ref.isdigit() and choices and int(ref) < min(len(choices), len(letters)):
        return letters[int(ref)]
    return None


def multiple_choice(pred: str | None, ref: str, choices: list[Any] | None, letters: str) -> bool:
    """A letter answer equals the reference's letter; a text answer equals the reference choice's text."""
    if pred is None:
        return False
    want = reference_letter(ref, choices, letters)
    pred = pred.strip()
    if len(pred) == 1 and pred.upper() in letters:
        return pred.upper() == want
    text = choices[letters.index(want)] if want is not None and choices and letters.index(want) < len(choices) else ref
    return pred.rstrip(".").strip().casefold() == str(text).strip().casefold()


def row_tests(scorer: CodeTestsScorer, row: dict[str, Any], where: str) -> tuple[str, tuple[str, ...]]:
    """(setup code, tests) of a row; DatasetError naming `where` when they are malformed."""
    tests = row.get(scorer.tests_field)
    tests = [tests] if isinstance(tests, str) else tests
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) and t.strip() for t in tests):
        raise DatasetError(f"{where}: {scorer.tests_field!r} must be test code or a non-empty list of it")
    setup = row.get(scorer.setup_field) if scorer.setup_field else ""
    if not isinstance(setup, str | None):
        raise DatasetError(f"{where}: {scorer.setup_field!r} must be a string of code")
    if scorer.entry_point_field:
        entry = row.get(scorer.entry_point_field)
        if not isinstance(entry, str) or not entry.isidentifier():
            raise DatasetError(f"{where}: {scorer.entry_point_field!r} must name a function, got {entry!r}")
    return setup or "", tuple(tests)


def _remote(scorer: CodeTestsScorer, row: dict[str, Any], setup: str, tests: tuple[str, ...], code: str) -> tuple:
    """The names the judge takes from the program: the entry point, else what the tests use that it defines.

    Never a builtin, a standard module or a name the setup defines: the judge keeps its own, so a program's
    `abs = lambda x: 0` judges nothing.
    """
    if scorer.entry_point_field:
        return (row[scorer.entry_point_field],)
    own = set(remote_names(list(tests), setup)) if setup.strip() else set()
    return tuple(
        n
        for n in remote_names(list(tests), code)
        if n not in own and not hasattr(builtins, n) and n not in sys.stdlib_module_names
    )


async def judge_code(
    scorer: CodeTestsScorer, code: str | None, row: dict[str, Any], allow_unsandboxed: bool
) -> SandboxResult | None:
    """Run the row's tests against the extracted program in the sandbox; None when there is no program."""
    if not code:
        return None
    setup, tests = row_tests(scorer, row, "row")
    program = "\n\n".join(p for p in (setup, code) if p.strip()) + "\n"
    spec = TestSpec(setup, tests, _remote(scorer, row, setup, tests, code))
    return await run_tests(program, spec, timeout_s=scorer.timeout_s, allow_unsandboxed=allow_unsandboxed)
