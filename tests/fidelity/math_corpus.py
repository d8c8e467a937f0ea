"""A generated corpus of MATH (completion, reference) pairs in every answer format, for lm-eval fidelity checks.

`build(n, seed)` is deterministic. Each item: `row` (what evalflow scores: `{"id", "problem", "solution"}` or,
for a third of them, `{"id", "problem", "answer"}`), `doc` (the same reference as lm-eval's minerva_math
reads it: `problem` and `solution`; an answer-only row's solution is `$\\boxed{answer}$`, as
envs.math.lm_eval_solution defines), `response`, `format` (how the completion states its answer) and
`answer_kind` (the reference's form).
"""

from __future__ import annotations

import random

# (kind, reference as written in a solution's box, forms of the same value a model might write, wrong values)
ANSWERS: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("integer", "24", ("24", "24.0", "{24}", "024", "\\boxed{24}", "x = 24"), ("25", "-24", "2.4")),
    ("integer", "-7", ("-7", "-7.0", "- 7", "{-7}"), ("7", "-8")),
    ("thousands", "100000", ("100,000", "100000", "100{,}000", "100\\,000"), ("10000", "100,001")),
    (
        "fraction",
        "\\frac{3}{5}",
        ("\\dfrac{3}{5}", "\\tfrac{3}{5}", "0.6", "3/5", "\\frac35", "\\frac{6}{10}"),
        ("\\frac{5}{3}", "0.66"),
    ),
    ("fraction", "-\\frac{2}{3}", ("-\\dfrac{2}{3}", "\\frac{-2}{3}", "-2/3", "-\\frac23"), ("\\frac{2}{3}", "-0.67")),
    ("decimal", "0.5", ("\\frac{1}{2}", ".5", "0.50", "\\frac12", "1/2"), ("0.05", "5")),
    ("decimal", "10.25", ("10.25", "\\frac{41}{4}", "10\\frac{1}{4}"), ("10.2", "1025")),
    ("sqrt", "6\\sqrt{2}", ("6\\sqrt2", "\\sqrt{72}", "6 \\sqrt{2}", "6\\cdot\\sqrt{2}"), ("6\\sqrt{3}", "\\sqrt{12}")),
    (
        "sqrt",
        "\\frac{\\sqrt{3}}{2}",
        ("\\dfrac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}", "\\sqrt{3}/2"),
        ("\\frac{\\sqrt{2}}{2}",),
    ),
    ("cube root", "2\\sqrt[3]{2}", ("2\\sqrt[3]2", "\\sqrt[3]{16}", "2 \\sqrt[3]{2}"), ("2\\sqrt{2}", "\\sqrt[3]{2}")),
    ("pi", "4\\pi", ("4 \\pi", "\\pi \\cdot 4", "4\\pi \\text{ cm}^2"), ("2\\pi", "4")),
    ("interval", "[2,5)", ("[2, 5)", "[2,5)", "\\left[2,5\\right)"), ("(2,5)", "[2,5]")),
    ("interval", "(-\\infty,3]", ("(-\\infty, 3]", "\\left(-\\infty,3\\right]"), ("(-\\infty,3)", "[3,\\infty)")),
    ("set", "1,2", ("1,2", "1, 2", "2,1", "\\{1,2\\}", "1 \\text{ and } 2"), ("12", "1,3")),
    ("tuple", "(1,-2)", ("(1,-2)", "(1, -2)", "\\left(1,-2\\right)"), ("(-2,1)", "(1,2)")),
    (
        "units",
        "10",
        ("10 \\text{ inches}", "10\\text{ feet}", "10 cm", "10 \\mbox{ ways}", "10^\\circ", "\\$10"),
        ("11 \\text{ inches}",),
    ),
    ("money", "18.50", ("\\$18.50", "18.5", "\\$18.5"), ("18.05",)),
    ("degrees", "45^\\circ", ("45", "45^{\\circ}", "45 \\text{ degrees}"), ("135^\\circ",)),
    ("letter", "\\text{(C)}", ("\\text{(C)}", "(C)", "C", "\\textbf{(C)}"), ("\\text{(B)}", "(D)")),
    ("expression", "x^2+2x+1", ("(x+1)^2", "x^2 + 2x + 1", "1+2x+x^2"), ("x^2+1", "(x-1)^2")),
    ("equation", "y=2x+3", ("y = 2x + 3", "2x+3", "y=3+2x"), ("y=2x-3",)),
    ("infinity", "\\infty", ("\\infty", "+\\infty"), ("-\\infty", "0")),
    (
        "matrix",
        "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
        ("\\begin{pmatrix}1\\\\2\\end{pmatrix}",),
        ("\\begin{pmatrix} 2 \\\\ 1 \\end{pmatrix}",),
    ),
    ("text", "\\text{Tuesday}", ("\\text{Tuesday}", "Tuesday"), ("\\text{Monday}",)),
    ("large", "2^{10}", ("1024", "2^{10}"), ("2^{11}", "1023")),
    ("base", "1011_2", ("1011_2", "1011_{2}"), ("1101_2",)),
)
WORK = (
    "We compute step by step. First, note that the expression simplifies.",
    "Let $x$ be the unknown. Then $2x + 3 = 11$, so we proceed.",
    "By the formula, the total is the product of the two counts.",
    "Squaring both sides and simplifying, we find the value below.",
)


def _final(answer: str, fmt: str) -> str:
    """A completion's closing that states `answer` in format `fmt`."""
    work = "{work}\n"
    return {
        "final line": work + "Final Answer: The final answer is ${a}$. I hope it is correct.",
        "final line, no closing phrase": work + "Final Answer: The final answer is ${a}$.",
        "final line, no closing phrase, no period": work + "Final Answer: The final answer is ${a}$",
        "final line, cut after answer and space": work + "Final Answer: The final answer is ${a}$. ",
        "final line, cut inside answer": work + "Final Answer: The final answer is ${cut}",
        "final line, no dollars": work + "Final Answer: The final answer is {a}. I hope it is correct.",
        "boxed only": work + "Therefore the answer is $\\boxed{{{a}}}$.",
        "boxed, no dollars": work + "So \\boxed{{{a}}}",
        "boxed with space": work + "The answer is $\\boxed {a}$.",
        "fbox": work + "The answer is $\\fbox{{{a}}}$.",
        "boxed and final line": work
        + "So $\\boxed{{{a}}}$.\nFinal Answer: The final answer is ${a}$. I hope it is correct.",
        "boxed and final line disagree": work
        + "So $\\boxed{{{other}}}$.\nFinal Answer: The final answer is ${a}$. I hope it is correct.",
        "plain text": work + "The answer is {a}.",
        "display math": work + "Thus\n$$x = {a}$$",
        "two final lines": work + "Final Answer: The final answer is ${other}$. I hope it is correct.\n"
        "Final Answer: The final answer is ${a}$. I hope it is correct.",
        "no answer": work + "I am not sure how to finish this problem.",
        "empty": "",
    }[fmt]


FORMATS = (
    "final line",
    "final line, no closing phrase",
    "final line, no closing phrase, no period",
    "final line, cut after answer and space",
    "final line, cut inside answer",
    "final line, no dollars",
    "boxed only",
    "boxed, no dollars",
    "boxed with space",
    "fbox",
    "boxed and final line",
    "boxed and final line disagree",
    "plain text",
    "display math",
    "two final lines",
    "no answer",
    "empty",
)


def _solution(ref: str, rng: random.Random) -> str:
    style = rng.randrange(4)
    if style == 0:
        return f"Working it out gives $\\boxed{{{ref}}}$."
    if style == 1:
        return f"First we try \\boxed{{0}}, which fails; in the end we get \\boxed{{{ref}}}."
    if style == 2:
        return f"$$ x = {ref} $$ so the answer is $\\boxed{{{ref}}}$.\nFinal Answer: The final answer is ${ref}$."
    return f"Hence the answer is $\\boxed{{{ref}}}$. Note that $\\frac{{1}}{{2}} < 1$."


def build(n: int = 2_000, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    items = []
    for i in range(n):
        kind, ref, same, wrong = ANSWERS[i % len(ANSWERS)]
        fmt = FORMATS[(i // len(ANSWERS)) % len(FORMATS)]
        roll = rng.random()
        answer = rng.choice(same) if roll < 0.6 else rng.choice(wrong) if roll < 0.85 else ref
        other = rng.choice(wrong if answer in same or answer == ref else same)
        response = _final(answer, fmt).format(
            work=rng.choice(WORK), a=answer, other=other, cut=answer[: max(1, len(answer) // 2)]
        )
        answer_only = rng.random() < 1 / 3
        problem = f"Problem {i}: find the {kind}."
        solution = f"$\\boxed{{{ref}}}$" if answer_only else _solution(ref, rng)
        row = {"id": f"m{i}", "problem": problem, **({"answer": ref} if answer_only else {"solution": solution})}
        items.append(
            {
                "task": "math",
                "row": row,
                "doc": {"problem": problem, "solution": solution},
                "response": response,
                "format": fmt,
                "answer_kind": kind,
            }
        )
    return items
