"""Reasoning models' raw completions (`<think>...</think>answer`) for GSM8K, MATH and IFEval, to check that the
metrics evalflow publishes under lm-eval's names equal lm-eval 0.4.13's with `think_end_token="</think>"`.

`build(n, seed)` is deterministic: n items per task, every shape in `SHAPES` about equally often. Each item:
`task`, `doc` (as lm-eval's dataset has it), `row` (what evalflow scores, where it differs from `doc`),
`response` (the raw completion), `think_end_token`, `shape`, `answer` (what follows the FIRST end tag,
left-stripped, as `core.reasoning.split_text` documents it: "" for a completion cut off while thinking, the
whole text for one without tags), `planted` (where a right answer was put: "thinking" (a right answer in
the thinking, a wrong one, or none, after it), "answer" (the converse), "before" (before the start tag, a
wrong answer after the block), "second block" (a second think block after the first), "unterminated",
"none") and `plant` (that right text alone). The answers reuse the other corpora: math_corpus's reference
kinds and answer formats, ifeval_corpus's docs and responses (a "wrong" IFEval response is another doc's; no
doc where lm-eval's verdict is random but for langdetect, which the comparison seeds as evalflow does).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tests.fidelity import ifeval_corpus, math_corpus
from tests.fidelity.ifeval_agreement import random_in_lm_eval

END = "</think>"


class Material:
    """One doc's pieces: a right and a wrong final answer, a right and a wrong statement to plant in the
    thinking, and neutral thinking text."""

    def __init__(
        self, doc: dict, row: dict | None, right: str, wrong: str, plant_right: str, plant_wrong: str, work: str
    ):
        self.doc, self.row, self.work = doc, row, work
        self.right, self.wrong, self.plant_right, self.plant_wrong = right, wrong, plant_right, plant_wrong


def gsm8k_material(i: int, rng: random.Random) -> Material:
    a, b = rng.randint(2, 60), rng.randint(2, 60)
    c = a * b if rng.random() < 0.5 else a * b * rng.choice((1, 10, 25)) - rng.randint(0, 40)
    w = c + rng.choice((-10, -2, -1, 1, 2, 7, 100))
    question = f"Question {i}: a shop packs {a} boxes of {b} pens. How many pens does it have?"
    answer: str | int = rng.choice(
        (f"{a} boxes hold {a} * {b} = <<{a}*{b}={c}>>{c} pens.\n#### {c}", f"#### {c}", str(c), c)
    )
    doc = {"question": question, "answer": answer}
    finals = (
        "{a} * {b} = {n}.\n#### {n}",
        "So the shop has {n} pens.",
        "The answer is ${nc}.",
        "Therefore the total is $\\boxed{{{n}}}$.",
        "#### {nc}",
        "Answer: {n}",
        "Total: {n} pens\n\n#### {n}",
    )
    final = rng.choice(finals)
    plants = ("#### {n}", "So the answer is {n}.", "\\boxed{{{n}}}", "The answer: {n}")
    plant = rng.choice(plants)

    def fill(template: str, n: int) -> str:
        return template.format(a=a, b=b, n=n, nc=f"{n:,}")

    work = rng.choice(
        (
            f"The shop has {a} boxes and each holds {b} pens, so I multiply.",
            f"Okay, {a} boxes, {b} pens each. Multiply them.",
            "Let me set up the product of boxes and pens per box.",
        )
    )
    return Material(doc, {"id": f"g{i}", **doc}, fill(final, c), fill(final, w), fill(plant, c), fill(plant, w), work)


MATH_FORMATS = (
    "final line",
    "final line, no closing phrase",
    "final line, no dollars",
    "boxed only",
    "boxed, no dollars",
    "boxed and final line",
    "plain text",
    "display math",
)


def math_material(i: int, rng: random.Random) -> Material:
    kind, ref, same, wrong = math_corpus.ANSWERS[i % len(math_corpus.ANSWERS)]
    fmt = rng.choice(MATH_FORMATS)

    def final(answer: str, other: str) -> str:
        template = math_corpus._final(answer, fmt)  # the MATH corpus's answer formats
        return template.format(work=rng.choice(math_corpus.WORK), a=answer, other=other, cut=answer[:1])

    right, bad = rng.choice((ref, *same)), rng.choice(wrong)
    plants = (
        "So $\\boxed{{{a}}}$.",
        "Final Answer: The final answer is ${a}$. I hope it is correct.",
        "Final Answer: The final answer is ${a}$.",
        "The answer is $\\boxed{{{a}}}$",
    )
    plant = rng.choice(plants)
    answer_only = rng.random() < 1 / 3
    problem = f"Problem {i}: find the {kind}."
    solution = f"$\\boxed{{{ref}}}$" if answer_only else math_corpus._solution(ref, rng)
    row = {"id": f"m{i}", "problem": problem, **({"answer": ref} if answer_only else {"solution": solution})}
    work = rng.choice(
        (
            f"We need the {kind}. Let me simplify step by step.",
            "Okay, so first I should rewrite the expression.",
            "Hmm, let me think about which formula applies here.",
        )
    )
    return Material(
        {"problem": problem, "solution": solution},
        row,
        final(right, bad),
        final(bad, right),
        plant.format(a=right),
        plant.format(a=bad),
        work,
    )


def ifeval_material(ifeval: list[dict]) -> Callable[[int, random.Random], Material]:
    def material(i: int, rng: random.Random) -> Material:
        item = ifeval[i]
        right = item["response"]
        wrong = ifeval[(i + 1 + rng.randrange(len(ifeval) - 1)) % len(ifeval)]["response"]
        work = rng.choice(
            (
                "The user wants a response that follows every instruction. Let me draft it first.",
                "Okay, I should check each constraint: length, format, keywords. A draft:",
                "Let me think about the format they asked for.",
            )
        )
        return Material(item["doc"], None, right, wrong, right, wrong, work)

    return material


WS = ("\n", "\n\n", "  ", " \n", "\t")
PRE = ("Okay, let me think.\n", "assistant\n", "Sure! ", "Let me reason first. ")
CUT = ("", " the", "\n\n", "...", " 3", " wait")
TRAIL = ("", "\n", "\n\n", " \n ")
CUT_TAGS = ("</thi", "</think", "</", "<think", "/think>")
# (what precedes the code's `</think>`, the code block): lm-eval reads what follows the LAST end tag
CODE = (
    '```python\nEND = "</think>"  # the tag that closes the reasoning\n```',
    "```\ntext.split('</think>')[-1]\n```",
    "The tag `</think>` closes the reasoning.",
)
# a shape: (material, rng) -> (response, answer after the first end tag, planted, plant)
Shape = Callable[[Material, random.Random], tuple[str, str, str, str]]


def _either(m: Material, rng: random.Random) -> tuple[str, str]:
    """A right or a wrong final answer, and where the right one is."""
    return (m.right, "answer") if rng.random() < 0.5 else (m.wrong, "none")


def think_answer(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    a, where = _either(m, rng)
    return f"<think>\n{m.work}\n</think>\n\n{a}", a, where, m.right


def right_in_thinking(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    return (
        f"<think>\n{m.work}\n{m.plant_right}\nLet me double-check.\n</think>\n\n{m.wrong}",
        m.wrong,
        "thinking",
        m.plant_right,
    )


def wrong_in_thinking(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    return f"<think>\n{m.work}\n{m.plant_wrong}\nNo, that is off.\n</think>\n\n{m.right}", m.right, "answer", m.right


def unterminated(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    text = f"<think>\n{m.work}\n{m.plant_right} Hmm but maybe{rng.choice(CUT)}"
    return text, "", "unterminated", m.plant_right


def unterminated_cut_tag(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    return f"<think>\n{m.work}\n{m.plant_right}\n{rng.choice(CUT_TAGS)}", "", "unterminated", m.plant_right


def unterminated_leading_ws(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    text = f"{rng.choice(WS)}<think>{m.work} {m.plant_right}{rng.choice(CUT)}"
    return text, "", "unterminated", m.plant_right


def empty_thinking(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    a, where = _either(m, rng)
    return f"<think></think>{a}", a, where, m.right


def empty_thinking_lines(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    a, where = _either(m, rng)
    return f"<think>\n\n</think>\n\n{a}", a, where, m.right


def closed_nothing_after(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    text = f"<think>\n{m.work}\n{m.plant_right}\n</think>{rng.choice(TRAIL)}"
    return text, "", "thinking", m.plant_right


def end_tag_in_code(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    first, last = rng.choice(((m.right, m.wrong), (m.wrong, m.right), (m.right, m.right), (m.wrong, m.wrong)))
    answer = f"{first}\n\n{rng.choice(CODE)}\n\n{last}"
    return f"<think>\n{m.work}\n</think>\n\n{answer}", answer, "answer" if m.right in (first, last) else "none", m.right


def second_block(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    second = f"<think>\n{m.plant_right}\n</think>\n\n{m.wrong}"  # a second block is reasoning too
    return f"<think>\n{m.work}\n</think>\n\n{second}", m.wrong, "second block", m.plant_right


def leading_ws(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    a, where = _either(m, rng)
    return f"{rng.choice(WS)}<think>\n{m.work}\n</think>\n\n{a}", a, where, m.right


def text_before(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    a, where = _either(m, rng)
    return f"{rng.choice(PRE)}<think>\n{m.work}\n</think>\n\n{a}", a, where, m.right


def right_before(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    return f"{m.plant_right}\n<think>\n{m.work}\n</think>\n\n{m.wrong}", m.wrong, "before", m.plant_right


def text_before_unterminated(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    text = f"{rng.choice(PRE)}<think>\n{m.work}\n{m.plant_right} Hmm but maybe"
    return text, "", "unterminated", m.plant_right  # an unclosed block after some text: all reasoning, as vLLM's


def no_tags(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    a, where = _either(m, rng)
    a = a.lstrip()  # lm-eval with think_end_token left-strips a completion without tags; evalflow does not
    return a, a, where, m.right


def template_opened(m: Material, rng: random.Random) -> tuple[str, str, str, str]:
    plant, a, where = (m.plant_right, m.wrong, "thinking") if rng.random() < 0.5 else (m.plant_wrong, m.right, "answer")
    return f"{m.work}\n{plant}\n</think>\n\n{a}", a, where, plant if where == "thinking" else a


SHAPES: dict[str, Shape] = {
    "think, answer": think_answer,
    "right in thinking, wrong answer": right_in_thinking,
    "wrong in thinking, right answer": wrong_in_thinking,
    "unterminated": unterminated,
    "unterminated, cut end tag": unterminated_cut_tag,
    "unterminated, leading whitespace": unterminated_leading_ws,
    "empty thinking": empty_thinking,
    "empty thinking, blank lines": empty_thinking_lines,
    "closed, nothing after": closed_nothing_after,
    "end tag in the answer's code": end_tag_in_code,
    "second think block": second_block,
    "leading whitespace": leading_ws,
    "text before <think>": text_before,
    "right before <think>, wrong answer": right_before,
    "text before <think>, unterminated": text_before_unterminated,
    "no tags": no_tags,
    "no start tag (template opened)": template_opened,
}
UNTERMINATED = (
    "unterminated", "unterminated, cut end tag", "unterminated, leading whitespace", "text before <think>, unterminated"
)  # fmt: skip


def build(n: int = 1_200, seed: int = 0) -> list[dict]:
    """n items per task (gsm8k, math, ifeval), the same for the same (n, seed)."""
    rng = random.Random(seed)
    # lm-eval counts a random letter on the docs of random_in_lm_eval: left out, so every verdict is lm-eval's
    ifeval = [item for item in ifeval_corpus.build(2 * n, seed) if not random_in_lm_eval(item["doc"])][:n]
    tasks = {"gsm8k": gsm8k_material, "math": math_material, "ifeval": ifeval_material(ifeval)}
    shapes = list(SHAPES.items())
    items = []
    for task, material in tasks.items():
        for i in range(n):
            m = material(i, rng)
            shape, make = shapes[i % len(shapes)]
            response, answer, planted, plant = make(m, rng)
            item = {"task": task, "doc": m.doc, "response": response, "think_end_token": END, "shape": shape}
            if m.row is not None:
                item["row"] = m.row
            # every shape but the tagless ones (which have no leading whitespace) drops the answer's leading whitespace
            items.append({**item, "answer": answer.lstrip(), "planted": planted, "plant": plant})
    return items
