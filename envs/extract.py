"""Answer extraction (lm-evaluation-harness's GSM8K filters), lm-eval's exact match, and numeric/symbolic equality.

GSM8K "strict-match" takes the number after `#### ` (first match, as lm-eval's regex filter does);
"flexible-extract" takes the last number-like token. lm-eval then scores `exact_match`: a string
comparison after dropping `,`, `$`, everything up to `#### ` and one trailing `.` from prediction and
reference, ignoring case (`lm_eval_exact_match`). `answers_equal` is looser: it compares numbers
(`42.0` = `42`), then falls back to math-verify. MATH-style answers come from the last `\\boxed{...}`.
"""

from __future__ import annotations

import re
import threading
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import cast

STRICT_RE = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE_RE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
# lm-eval gsm8k.yaml: exact_match with ignore_case, these `regexes_to_ignore` (applied in this order to
# prediction and reference), and the regex filter's fallback when nothing matches.
LM_EVAL_IGNORE = tuple(re.compile(p) for p in (",", r"\$", r"(?s).*#### ", r"\.$"))
LM_EVAL_FALLBACK = "[invalid]"
_BOX_COMMANDS = ("\\boxed", "\\fbox")
_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_THOUSANDS_RE = re.compile(r"[+-]?\$?\d{1,3}(?:,\d{3})+(?:\.\d*)?")
_DIGITS_AND_DOTS_RE = re.compile(r"[0-9.]*[0-9][0-9.]*")
# math_verify parses with sympy; long strings are where it gets slow, and extracted answers are short.
MAX_VERIFY_CHARS = 200
VERIFY_TIMEOUT_S = 5


def normalize_number(text: str) -> str:
    """lm-eval's cleanup of an extracted answer: drop `,` and `$`, then one trailing `.`."""
    text = text.strip().replace(",", "").replace("$", "")
    return text[:-1] if text.endswith(".") else text


def lm_eval_strict(text: str) -> str | None:
    """lm-eval's strict-match filter output: the first `#### <number>` capture, stripped; None for its fallback."""
    m = STRICT_RE.search(text)
    return m.group(1).strip() if m else None


def lm_eval_flexible(text: str) -> str | None:
    """lm-eval's flexible-extract filter output: the last number-like token, stripped; None for its fallback."""
    matches = FLEXIBLE_RE.findall(text)
    return next(g for g in matches[-1] if g).strip() if matches else None


def normalize_answer(raw: str | None) -> str | None:
    """A filter output as a number string (`$1,234.` -> `1234`); None when there is none or nothing is left."""
    return (normalize_number(raw) or None) if raw is not None else None


def _lm_eval_clean(text: str) -> str:
    for pattern in LM_EVAL_IGNORE:
        text = pattern.sub("", text)
    return text.lower()


def lm_eval_exact_match(prediction: str | None, reference: str) -> bool:
    """lm-eval's gsm8k `exact_match` of a filter output (None: no match) against the raw `answer` text."""
    return _lm_eval_clean(LM_EVAL_FALLBACK if prediction is None else prediction) == _lm_eval_clean(reference)


def _balanced(text: str, start: int) -> str | None:
    """Content of the brace group opening at text[start] == "{", or None if it never closes."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` / `\\fbox{...}` (nested braces kept) or `\\boxed 5`.

    None if there is no box, the last one is empty, or its braces never close (a truncated completion).
    """
    start, command = max((text.rfind(c), c) for c in _BOX_COMMANDS)
    if start < 0:
        return None
    after = start + len(command)
    rest = after
    while rest < len(text) and text[rest] in " \t":
        rest += 1
    if rest < len(text) and text[rest] == "{":
        content = _balanced(text, rest)
    elif rest > after:
        # `\boxed 5`: the argument is the next token, ending at whitespace or a closing `$`.
        m = re.match(r"[^\s$]+", text[rest:])
        content = m.group(0).rstrip(".,;") if m else None
    else:
        return None
    if content is None or not content.strip():
        return None
    return content.strip()


def to_number(text: str) -> Decimal | None:
    """Parse a plain number (`-1,234.50`, `$18`, `3.`); None for anything else (fractions, LaTeX, words)."""
    s = text.strip()
    if _THOUSANDS_RE.fullmatch(s):
        s = s.replace(",", "")
    s = s.replace("$", "", 1) if s.lstrip("+-").startswith("$") else s
    if s.endswith("."):
        s = s[:-1]
    if not _NUMBER_RE.fullmatch(s):
        return None
    try:
        return Decimal(s)
    except InvalidOperation:
        return None


def has_malformed_number(text: str) -> bool:
    """Whether a run of digits and dots is no number: `12..34`, `0.0.0`, `1..5` (one trailing `.` is a full stop).

    math-verify reads such runs as their leading number (`12..34` as 12) or a product (`0.0.0` as 0*0).
    """
    return any(
        ".." in run or run.count(".") > 1
        for run in (m.group(0).removesuffix(".") for m in _DIGITS_AND_DOTS_RE.finditer(text))
    )


def answers_equal(pred: str | None, ref: str | None) -> bool:
    """Whether a predicted answer equals the reference: exact or numeric first, math_verify as a fallback.

    Numbers compare by value (`42.0` = `042` = `42`), unlike lm-eval's exact match; a malformed number
    (has_malformed_number) equals only the identical string.
    """
    if pred is None or ref is None:
        return False
    pred, ref = pred.strip(), ref.strip()
    if not pred or not ref:
        return False
    if pred == ref:
        return True
    p, r = to_number(pred), to_number(ref)
    if p is not None and r is not None:
        return p == r
    if has_malformed_number(pred) or has_malformed_number(ref):
        return False
    return _math_verify_equal(pred, ref)


def _mv_parse(text: str, timeout: int | None) -> list:
    from math_verify import parse

    if to_number(text) is None and not text.startswith("$"):
        # Bare LaTeX from a box: undelimited, math-verify reads only a leading number (`1+\sqrt{2}` as 1,
        # `\left(2,3\right)` as 3), so give it math delimiters first.
        parsed = parse(f"${text}$", parsing_timeout=cast(int, timeout))  # None: no limit (math-verify's `int` hint)
        if parsed:
            return parsed
    return parse(text, parsing_timeout=cast(int, timeout))


@lru_cache(maxsize=65536)
def _math_verify_equal(pred: str, ref: str) -> bool:
    """Symbolic equivalence via math_verify; any error or timeout counts as not equal.

    math_verify's timeout uses SIGALRM, which only works on the main thread; elsewhere it runs without
    one, so the input length cap is what keeps it from stalling a rollout worker.
    """
    if len(pred) > MAX_VERIFY_CHARS or len(ref) > MAX_VERIFY_CHARS:
        return False
    timeout = VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    from math_verify import verify
    from math_verify.errors import TimeoutException  # a BaseException, so `except Exception` misses it

    try:
        gold, target = _mv_parse(ref, timeout), _mv_parse(pred, timeout)
        if not gold or not target:
            return False
        return bool(verify(gold, target, timeout_seconds=timeout))
    except (Exception, TimeoutException):
        return False
