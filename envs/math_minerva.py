"""Minerva's answer extraction and normalization (Lewkowycz et al. 2022, appendix D), as lm-eval's minerva_math.

Written for this project from the published rules: `minerva_answer` takes the text after "Final Answer:
The final answer is" (lm-eval's `get_unnormalized_answer`), else the last `\\boxed{}`; `normalize_final_answer`
applies the paper's substitutions, removed expressions and LaTeX clean-ups; `minerva_exact_match` compares
the normalized strings.
"""

from __future__ import annotations

import re

from envs.extract import last_boxed

# lm-eval appends the end phrase before matching (so a line cut off right after "is $X$. " still matches);
# its pattern's dots are regex wildcards, kept so that exactly the same texts match.
END_PHRASE = "I hope it is correct."
_FINAL_ANSWER_RE = re.compile(r"Final Answer: The final answer is(.*?). I hope it is correct.")

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
# (pattern, replacement) in the paper's order: keep the inside of $...$, \text{}, \textbf{}, \overline{},
# \boxed{}; then expand shorthand TeX (\frac12 -> \frac{1}{2}, \sqrt2 -> \sqrt{2}).
_CLEANUPS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(.*?)(\$)(.*?)(\$)(.*)"), "$\\3$"),
    (re.compile(r"(\\text\{)(.*?)(\})"), "\\2"),
    (re.compile(r"(\\textbf\{)(.*?)(\})"), "\\2"),
    (re.compile(r"(\\overline\{)(.*?)(\})"), "\\2"),
    (re.compile(r"(\\boxed\{)(.*)(\})"), "\\2"),
    (re.compile(r"(frac)([^{])(.)"), "frac{\\2}{\\3}"),
    (re.compile(r"(sqrt)([^{])"), "sqrt{\\2}"),
)


def final_answer_line(text: str) -> str | None:
    """The text after "Final Answer: The final answer is" up to ". I hope it is correct." (or the end)."""
    match = _FINAL_ANSWER_RE.search(text + END_PHRASE)
    return match.group(1).strip() if match else None


def minerva_answer(text: str) -> str | None:
    """The unnormalized answer: the Final Answer line, else the last `\\boxed{}`; None if neither."""
    line = final_answer_line(text)
    return line if line is not None else last_boxed(text)


def normalize_final_answer(final_answer: str) -> str:
    """Minerva's normalization of a final answer (appendix D of Lewkowycz et al. 2022)."""
    final_answer = final_answer.split("=")[-1]
    for before, after in SUBSTITUTIONS:
        final_answer = final_answer.replace(before, after)
    for expr in REMOVED_EXPRESSIONS:
        final_answer = final_answer.replace(expr, "")
    for pattern, replacement in _CLEANUPS:
        final_answer = pattern.sub(replacement, final_answer)
    final_answer = final_answer.replace("$", "")
    if final_answer.replace(",", "").isdigit():  # 100,000 -> 100000
        final_answer = final_answer.replace(",", "")
    return final_answer


def minerva_exact_match(prediction: str | None, reference: str) -> bool:
    """Whether a prediction (None: no answer found) equals the reference after both are normalized."""
    return prediction is not None and normalize_final_answer(prediction) == normalize_final_answer(reference)
