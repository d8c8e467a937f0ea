"""Hand-checked extraction and equivalence cases (lm-eval's GSM8K filters and exact match, boxed answers)."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest

from envs.extract import (
    answers_equal,
    has_malformed_number,
    last_boxed,
    lm_eval_exact_match,
    lm_eval_flexible,
    lm_eval_strict,
    normalize_answer,
    normalize_number,
    to_number,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("So the total is 12.\n#### 12", "12"),
        ("#### 1,234.", "1234"),
        ("#### -7", "-7"),
        ("#### 3.50", "3.50"),
        ("She pays $18.\n#### 18.", "18"),
        ("first #### 5 then #### 6", "5"),  # lm-eval's strict filter takes the first match
        ("####12", None),  # the space after #### is required
        ("The answer is 12.", None),
        ("#### $18", None),  # `$` is not in the strict pattern
    ],
)
def test_strict_match(text: str, expected: str | None) -> None:
    """lm-eval's strict filter, then the normalization GSM8K's numeric `strict_correct` compares."""
    assert normalize_answer(lm_eval_strict(text)) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("He has 3 apples and buys 4, so 7.", "7"),
        ("The total cost is $1,234.", "1234"),
        ("It fell to -15 degrees", "-15"),
        ("5 + 6 = 11\n#### 11", "11"),
        ("Answer: 0.5", "0.5"),
        ("only one digit: 7", "7"),
        ("no digits here", None),
    ],
)
def test_flexible_extract(text: str, expected: str | None) -> None:
    """lm-eval's flexible filter, then the normalization GSM8K's numeric `flexible_correct` compares."""
    assert normalize_answer(lm_eval_flexible(text)) == expected


@pytest.mark.parametrize(
    ("text", "malformed"),
    [
        ("12..34", True),
        ("0.0.0", True),
        ("1..5", True),
        ("x = 1.2.3 units", True),
        ("12", False),
        ("1,234", False),
        ("-3", False),
        ("3.50", False),
        (".5", False),
        ("3.", False),  # a full stop
        ("x = 1.5.", False),
        ("1, 2, \\ldots", False),
        ("1, 2, ...", False),  # an ellipsis holds no digit
        ("0.\\overline{3}", False),
    ],
)
def test_has_malformed_number(text: str, malformed: bool) -> None:
    assert has_malformed_number(text) is malformed


@pytest.mark.parametrize(
    ("text", "strict", "flexible"),
    [
        ("So 12.\n#### 1,234.", "1,234.", "1,234."),
        ("The cost is $1,234.", None, "$1,234."),
        ("first #### 5 then #### 6", "5", "6"),
        ("#### -7 ", "-7", "-7"),
        ("no digits", None, None),
    ],
)
def test_lm_eval_filter_outputs_are_raw(text: str, strict: str | None, flexible: str | None) -> None:
    assert (lm_eval_strict(text), lm_eval_flexible(text)) == (strict, flexible)


@pytest.mark.parametrize(
    ("prediction", "reference", "match"),
    [
        ("42", "42", True),
        ("42.", "42", True),  # one trailing '.' goes
        ("$1,234.", "1234", True),
        ("1,234", "Work: 1,000 + 234.\n#### 1,234", True),  # the target is cut after its last '#### '
        ("42", "#### 41\n#### 42", True),
        ("42.0", "42", False),  # numerically equal, different strings
        ("042", "42", False),
        (".5", "0.5", False),
        ("3.50", "3.5", False),
        ("42..", "42", False),  # only one trailing '.'
        ("12..34", "12", False),
        ("42", "42 ", False),  # no whitespace is stripped from the target
        (None, "42", False),  # lm-eval's "[invalid]" fallback
        (None, "[INVALID]", True),  # ... which is compared like any prediction, ignoring case
    ],
)
def test_lm_eval_exact_match(prediction: str | None, reference: str, match: bool) -> None:
    assert lm_eval_exact_match(prediction, reference) is match


def test_normalize_number_strips_one_trailing_period_like_lm_eval() -> None:
    assert normalize_number(" $1,000. ") == "1000"
    assert normalize_number("42..") == "42."


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so $\\boxed{42}$.", "42"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\frac{\\sqrt{3}}{2}} done", "\\frac{\\sqrt{3}}{2}"),
        ("first \\boxed{1}, then \\boxed{2}", "2"),
        ("\\fbox{7}", "7"),
        ("\\boxed{3} or \\fbox{4}", "4"),
        ("$\\boxed 5$", "5"),
        ("\\boxed 5.", "5"),
        ("\\boxed {9}", "9"),
        ("\\boxed{}", None),
        ("\\boxed{12", None),  # truncated completion: braces never close
        ("no box", None),
        ("\\boxedx", None),
    ],
)
def test_last_boxed(text: str, expected: str | None) -> None:
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1,234", Decimal(1234)),
        ("-$18", Decimal(-18)),
        ("3.", Decimal(3)),
        ("1e3", Decimal(1000)),
        ("1,2", None),  # not a thousands separator
        ("1/2", None),
        ("12 dollars", None),
    ],
)
def test_to_number(text: str, expected: Decimal | None) -> None:
    assert to_number(text) == expected


@pytest.mark.parametrize(
    ("pred", "ref", "equal"),
    [
        ("3.0", "3", True),
        ("18", "18", True),
        ("1,234", "1234", True),
        ("$18", "18", True),
        ("17", "18", False),
        ("0.5", "1/2", True),  # math_verify
        ("\\frac{1}{2}", "0.5", True),  # math_verify, bare LaTeX
        ("\\frac12", "0.5", True),
        ("\\sqrt{4}", "2", True),
        ("\\frac{1}{3}", "0.5", False),
        ("abc", "42", False),
        (None, "42", False),
        ("", "42", False),
        ("42", None, False),
        # malformed numbers: math-verify reads `12..34` as 12 and `0.0.0` as 0*0
        ("12..34", "12", False),
        ("12..34", "1234", False),
        ("0.0.0", "0", False),
        ("1..5", "1", False),
        ("1..5", "1.5", False),
        ("1.2.3", "1.2", False),
        ("3.14...", "\\pi", False),
        ("12", "12..34", False),
        ("12..34", "12..34", True),  # the identical string
        # well-formed numbers keep working
        ("-3", "-3", True),
        ("3.50", "3.5", True),
        (".5", "0.5", True),
        (".5", "\\frac{1}{2}", True),
        ("12.", "12", True),
        ("3,2,1", "1,2,3", True),  # a list, not a malformed number: math-verify compares it as a set
    ],
)
def test_answers_equal(pred: str | None, ref: str | None, equal: bool) -> None:
    assert answers_equal(pred, ref) is equal


def test_answers_equal_fast_path_skips_math_verify(monkeypatch: pytest.MonkeyPatch) -> None:
    import envs.extract as extract

    def boom(pred: str, ref: str) -> bool:
        raise AssertionError("math_verify called on a numeric pair")

    monkeypatch.setattr(extract, "_math_verify_equal", boom)
    assert answers_equal("3.0", "3")
    assert not answers_equal("4", "3")


def test_math_verify_errors_count_as_not_equal(monkeypatch: pytest.MonkeyPatch) -> None:
    import math_verify

    import envs.extract as extract

    def raising_parse(*args: object, **kwargs: object) -> list:
        raise RuntimeError("sympy blew up")

    monkeypatch.setattr(math_verify, "parse", raising_parse)
    extract._math_verify_equal.cache_clear()
    try:
        assert not answers_equal("x+1", "1+x")
    finally:
        extract._math_verify_equal.cache_clear()


def test_math_verify_fallback_works_off_the_main_thread() -> None:
    """Rollout workers run in threads, where math_verify's SIGALRM timeout cannot be used."""
    import envs.extract as extract

    extract._math_verify_equal.cache_clear()
    results: list[bool] = []
    worker = threading.Thread(target=lambda: results.append(answers_equal("1/4", "0.25")))
    worker.start()
    worker.join(timeout=30)
    assert results == [True]


def test_long_inputs_skip_math_verify() -> None:
    assert not answers_equal("1/2" + "+0" * 150, "0.5")


def test_bare_latex_is_compared_whole_not_by_its_leading_number() -> None:
    assert not answers_equal("1+\\sqrt{2}", "1")
    assert not answers_equal("\\left(2,3\\right)", "3")
    assert answers_equal("\\sqrt{2}+1", "1+\\sqrt{2}")
    assert answers_equal("\\frac{1}{2}", "0.5")


def test_normalize_answer_of_no_match_or_nothing_left() -> None:
    assert normalize_answer(None) is None
    assert normalize_answer("$.") is None  # nothing is left after the cleanup
    assert normalize_answer(" $1,234. ") == "1234"
