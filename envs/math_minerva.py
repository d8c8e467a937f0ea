"""lm-evaluation-harness 0.4.13's minerva_math scoring: `exact_match` and `math_verify`, by its own definitions.

Ported from `lm_eval/tasks/minerva_math/utils.py` (lm-evaluation-harness, MIT licence; the normalization is
appendix D of Lewkowycz et al. 2022 with lm-eval's later fixes for units inside LaTeX commands, indexed
roots and thousands separators). `exact_match`: the answer after "Final Answer: The final answer is" (no
other form: a `\\boxed{}`-only completion scores 0), normalized, against the normalized last `\\boxed{}` of the
reference solution, equal as strings or by sympy (`parse_latex` of both, difference simplifies to 0).
`math_verify`: math-verify's `verify(parse(solution), parse(completion))` with its default extraction.

Both use SIGALRM timeouts (sympy's 5 s, math-verify's own), as lm-eval does, so they must run on a
process's main thread: `envs.main_thread.call` gets them there from anywhere (lm-eval, called off the main
thread, would score every such pair 0 as a side effect of its timeout failing to start).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

INVALID_ANSWER = "[invalidanswer]"
END_PHRASE = "I hope it is correct."
# lm-eval's pattern, dots as regex wildcards included, matched after appending END_PHRASE (so a completion
# cut off right after "is $X$. " still matches, and one ending "$X$." does not: no space before "I hope").
_FINAL_ANSWER_RE = re.compile(r"Final Answer: The final answer is(.*?). I hope it is correct.")
SYMPY_TIMEOUT_S = 5

SUBSTITUTIONS: tuple[tuple[str, str], ...] = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    (r"\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
REMOVED_EXPRESSIONS: tuple[str, ...] = (
    "square",
    "ways",
    "integers",
    "dollars",
    "mph",
    "inches",
    "ft",
    "hours",
    "km",
    "units",
    "\\ldots",
    "sue",
    "points",
    "feet",
    "minutes",
    "digits",
    "cents",
    "degrees",
    "cm",
    "gm",
    "pounds",
    "meters",
    "meals",
    "edges",
    "students",
    "childrentickets",
    "multiples",
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    r"\mathrm{th}",
    r"^\circ",
    r"^{\circ}",
    r"\;",
    r",\!",
    "{,}",
    '"',
    "\\dots",
)
_LATEX_COMMAND = re.compile(r"(\\[a-zA-Z]+)")


def final_answer_line(text: str) -> str | None:
    """The text after "Final Answer: The final answer is" (lm-eval's `get_unnormalized_answer`), or None."""
    match = _FINAL_ANSWER_RE.search(text + END_PHRASE)
    return match.group(1).strip() if match else None


def last_boxed_only_string(string: str) -> str | None:
    """lm-eval's last `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed ...` up to a `$`) with its command; None if none."""
    idx = string.rfind("\\boxed")
    if "\\boxed " in string:
        return "\\boxed " + string.split("\\boxed ")[-1].split("$")[0]
    if idx < 0:
        idx = string.rfind("\\fbox")
        if idx < 0:
            return None
    depth = 0
    for i in range(idx, len(string)):
        if string[i] == "{":
            depth += 1
        elif string[i] == "}":
            depth -= 1
            if depth == 0:
                return string[idx : i + 1]
    return None


def remove_boxed(boxed: str) -> str | None:
    """The argument of a `\\boxed{...}` / `\\boxed ...` string; None where lm-eval's asserts would fail."""
    if "\\boxed " in boxed:
        return boxed[len("\\boxed ") :] if boxed.startswith("\\boxed ") else None
    if boxed.startswith("\\boxed{") and boxed.endswith("}"):
        return boxed[len("\\boxed{") : -1]
    return None


def reference_answer(solution: str) -> str | None:
    """lm-eval's `process_docs` answer: the solution's last box, normalized; None where lm-eval would crash."""
    boxed = last_boxed_only_string(solution)
    inner = remove_boxed(boxed) if boxed is not None else None
    return normalize_final_answer(inner) if inner is not None else None


def normalize_final_answer(final_answer: str) -> str:
    """lm-eval 0.4.13's `normalize_final_answer`, step for step."""
    final_answer = final_answer.split("=")[-1]
    # unit words first, while whitespace still delimits them (so "\left" keeps its "ft")
    for expr in REMOVED_EXPRESSIONS:
        if expr.isalpha():
            final_answer = re.sub(rf"(?<!\\)\b{expr}\b", "", final_answer)
    for before, after in SUBSTITUTIONS:
        final_answer = final_answer.replace(before, after)
    for expr in REMOVED_EXPRESSIONS:
        if expr.isalpha():  # units glued on once spaces are gone, skipping LaTeX command names
            segments = _LATEX_COMMAND.split(final_answer)
            for i in range(0, len(segments), 2):
                segments[i] = segments[i].replace(expr, "")
            final_answer = "".join(segments)
        else:
            final_answer = final_answer.replace(expr, "")
    final_answer = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", final_answer)
    final_answer = re.sub(r"(\\text\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\textbf\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\overline\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", final_answer)
    final_answer = re.sub(r"(sqrt)(\[[^\]]*\])(\w)", "\\1\\2{\\3}", final_answer)
    final_answer = re.sub(r"(sqrt)(?!\[)([^{])", "sqrt{\\2}", final_answer)
    final_answer = final_answer.replace("$", "")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+", final_answer):  # 100,000 -> 100000, but not the pair 0,1
        final_answer = final_answer.replace(",", "")
    return final_answer


class _Timeout(Exception):
    pass


@contextmanager
def _alarm(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@lru_cache(maxsize=8192)
def _parse_latex(latex: str) -> Any:
    """sympy's `parse_latex`, memoised (a reference is parsed once for all its samples; sympy expressions are
    immutable). ANTLR parsing is most of the cost of `is_equiv`; failures raise each time, as they are not kept."""
    from sympy.parsing.latex import parse_latex

    return parse_latex(latex)


def is_equiv(x1: str, x2: str) -> bool:
    """lm-eval's `is_equiv` of two normalized answers: identical, or sympy says their difference is 0.

    Any parse, subtraction or simplification failure, or the 5 s timeout, is "not equivalent". Main thread only.
    """
    if x1 and x1 == x2:
        return True
    import sympy
    from sympy.parsing.latex.errors import LaTeXParsingError

    try:
        with _alarm(SYMPY_TIMEOUT_S):
            try:
                diff = _parse_latex(x1) - _parse_latex(x2)
            except (LaTeXParsingError, sympy.SympifyError, TypeError):
                return False
            try:
                return bool(sympy.simplify(diff) == 0)
            except ValueError:
                return False
    except _Timeout:
        return False
    except ImportError:
        raise
    except Exception:
        return False


def exact_match(completion: str, solution: str) -> bool:
    """lm-eval minerva_math `exact_match` of a completion against the reference solution. Main thread only."""
    reference = reference_answer(solution)
    answer = final_answer_line(completion)
    normalized = normalize_final_answer(INVALID_ANSWER if answer is None else answer)
    return reference is not None and is_equiv(normalized, reference)


def math_verify(completion: str, solution: str) -> tuple[bool, str | None]:
    """lm-eval minerva_math `math_verify` (math-verify's default parse of both texts, then `verify`), and the
    answer text math-verify extracted from the completion (None: nothing). Main thread only."""
    from math_verify import parse, verify

    target = parse(completion)
    return bool(verify(gold=parse(solution), target=target)), (str(target[-1]) if target else None)
