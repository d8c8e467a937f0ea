"""MATH few-shot and completion modes (lm-eval minerva_math's prompt) and lm-eval 0.4.13's two minerva scores."""

from __future__ import annotations

import json

import pytest

from envs.math import FEWSHOT_PATH, MathEnv
from envs.math_minerva import exact_match, final_answer_line, is_equiv, normalize_final_answer, reference_answer

ROW = {"id": "m-1", "problem": "What is $\\frac{2}{4}$ in lowest terms?", "answer": "\\frac{1}{2}"}
EXAMPLES = [json.loads(line) for line in FEWSHOT_PATH.read_text(encoding="utf-8").splitlines()]


def test_fewshot_file_holds_the_four_minerva_examples() -> None:
    assert len(EXAMPLES) == 4
    problems = [ex["problem"] for ex in EXAMPLES]
    assert problems[0].startswith("Find the domain of the expression  $\\frac{\\sqrt{x-2}}{\\sqrt{5-x}}$")
    assert "\\det \\mathbf{A} = 2" in problems[1] and "\\det \\mathbf{B} = 12" in problems[1]
    assert problems[2].startswith("Terrell usually lifts two 20-pound weights 12 times.")
    assert "6x-4y&=a" in problems[3] and "6y-9x &=b" in problems[3]
    finals = ["[2,5)", "24", "16", "-\\frac{2}{3}"]
    env = MathEnv()
    for ex, final in zip(EXAMPLES, finals, strict=True):
        assert ex["solution"].endswith(f"\nFinal Answer: The final answer is ${final}$. I hope it is correct.")
        assert env.reference(ex) == final
        score = env.score(ex, ex["solution"])  # each worked solution scores right on both counts
        assert score.success and score.info["exact_match"] and score.info["minerva_answer"] == f"${final}$"


def test_completion_prompt_is_lm_eval_minerva() -> None:
    env = MathEnv(fewshot=2, mode="completion")
    expected = (
        f"Problem:\n{EXAMPLES[0]['problem']}\n\nSolution: {EXAMPLES[0]['solution']}\n\n"
        f"Problem:\n{EXAMPLES[1]['problem']}\n\nSolution: {EXAMPLES[1]['solution']}\n\n"
        f"Problem:\n{ROW['problem']}\n\nSolution:"
    )
    assert env.prompt(ROW) == expected
    assert env.stop() == ["Problem:", "</s>", "<|im_end|>"]
    assert MathEnv(mode="completion").prompt(ROW) == f"Problem:\n{ROW['problem']}\n\nSolution:"
    assert MathEnv(mode="completion", system_prompt="Be exact.").prompt(ROW).startswith("Be exact.\n\nProblem:\n")
    with pytest.raises(ValueError, match="plain-text prompt"):
        env.messages(ROW)


def test_chat_fewshot_turns() -> None:
    msgs = MathEnv(fewshot=4, system_prompt="S").messages(ROW)
    assert [m["role"] for m in msgs] == ["system"] + ["user", "assistant"] * 4 + ["user"]
    assert msgs[1]["content"] == f"{EXAMPLES[0]['problem'].strip()}\n\nPut your final answer within \\boxed{{}}."
    assert [m["content"] for m in msgs[2:9:2]] == [ex["solution"] for ex in EXAMPLES]
    assert MathEnv().prompt(ROW) is None and MathEnv().stop() is None


def test_options_enter_the_fingerprint_and_are_checked() -> None:
    prints = {MathEnv().fingerprint(), MathEnv(fewshot=4).fingerprint(), MathEnv(mode="completion").fingerprint()}
    assert len(prints) == 3
    for bad in ({"fewshot": 5}, {"fewshot": -1}, {"fewshot": True}, {"mode": "base"}):
        with pytest.raises(ValueError, match=r"fewshot|mode"):
            MathEnv(**bad)


# Expected values printed by lm-eval 0.4.13's own `normalize_final_answer` on these inputs.
@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("$100,000$", "100000"),
        ("10 \\text{ inches}", "10"),
        ("\\frac12", "\\frac{1}{2}"),
        ("\\sqrt2", "\\sqrt{2}"),
        ("x = 5", "5"),
        ("\\boxed{5}", "5"),
        ("45^{\\circ}", "45"),
        ("\\$18.50", "18.50"),
        ("$[2,5)$", "[2,5)"),
        ("\\text{(A)}", "(A)"),
        ("\\textbf{7}", "7"),
        ("5 \\mbox{ cm}", "5"),
        ("12 \\text{ ways}", "12"),
        ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{3}}{2}"),
        ("\\dfrac{1}{2}", "\\dfrac{1}{2}"),
        # 0.4.13's fixes over the paper's rules: a pair keeps its comma, "\\left" keeps its "ft", indexed roots
        ("1,2", "1,2"),
        ("0,1", "0,1"),
        ("\\left(2,3\\right)", "\\left(2,3\\right)"),
        ("\\sqrt[3]{8}", "\\sqrt[3]{8}"),
        ("\\sqrt[3]2", "\\sqrt[3]{2}"),
        ("(-\\infty, 3]", "(-\\infty,3]"),
        ("2\\pi cm", "2\\pi"),
    ],
)
def test_normalize_final_answer(raw: str, normalized: str) -> None:
    assert normalize_final_answer(raw) == normalized


# Verdicts of lm-eval 0.4.13's own `is_equiv` (sympy's parse_latex, then simplify the difference).
@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ("\\dfrac{3}{5}", "\\frac{3}{5}", True),
        ("0.6", "\\frac{3}{5}", True),
        ("10.0", "10", True),
        ("{10}", "10", True),
        ("x^2+2x+1", "(x+1)^2", True),
        ("[2,5)", "[2,5)", True),  # sympy cannot parse it, identical strings count
        ("12", "1,2", False),
        ("[invalidanswer]", "5", False),
    ],
)
def test_is_equiv_is_lm_evals(a: str, b: str, equal: bool) -> None:
    assert is_equiv(a, b) is equal


def test_answer_extraction() -> None:
    text = "So $\\boxed{3}$.\nFinal Answer: The final answer is $7$. I hope it is correct."
    assert final_answer_line(text) == "$7$"
    assert final_answer_line("Final Answer: The final answer is $7$. ") == "$7$"  # cut right before the phrase
    # lm-eval's pattern needs a space before the appended phrase: "$7$." at the very end is no Final Answer
    assert final_answer_line("Final Answer: The final answer is $7$.") is None
    assert final_answer_line("We get \\boxed{\\frac{1}{2}}.") is None
    assert not exact_match("We get \\boxed{\\frac{1}{2}}.", "$\\boxed{\\frac{1}{2}}$")  # boxed only: 0 in lm-eval
    assert reference_answer("first \\boxed{2}, then \\boxed{\\dfrac{1}{2}}") == "\\dfrac{1}{2}"
    assert reference_answer("no box") is None and reference_answer("\\fbox{3}") is None  # lm-eval would crash


@pytest.mark.parametrize(
    ("completion", "reward", "exact"),
    [
        ("Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.", 1.0, True),  # no box: the line
        ("$\\boxed{\\frac12}$\nFinal Answer: The final answer is $\\frac12$. I hope it is correct.", 1.0, True),
        ("The answer is $\\boxed{0.5}$.", 1.0, False),  # no Final Answer line: no exact match
        ("Final Answer: The final answer is $0.5$. I hope it is correct.", 1.0, True),  # sympy: 0.5 = 1/2
        ("Final Answer: The final answer is $\\dfrac{1}{2}$.", 1.0, False),  # no closing phrase: math_verify only
        ("\\boxed{\\frac{1}{2}}\nFinal Answer: The final answer is $\\frac{1}{3}$. I hope it is correct.", 1.0, False),
    ],
)
def test_exact_match_and_reward_are_separate(completion: str, reward: float, exact: bool) -> None:
    score = MathEnv(fewshot=4, mode="completion").score(ROW, completion)
    assert (score.reward, score.info["exact_match"]) == (reward, exact)


def test_exact_match_is_a_headline_lm_eval_metric() -> None:
    spec = {m.key: m for m in MathEnv.metrics}["exact_match"]
    assert (spec.kind, spec.headline, spec.label) == ("rate", True, "exact_match (lm-eval minerva)")
    assert MathEnv.lm_eval_metrics == (("exact_match,none", "exact_match"), ("math_verify,none", "math_verify"))
    spec = {m.key: m for m in MathEnv.metrics}["math_verify"]
    assert (spec.kind, spec.headline, spec.label) == ("rate", True, "math_verify (lm-eval minerva)")


def test_a_final_answer_line_without_a_box_is_scored_and_parsed() -> None:
    """The few-shot format ends with "Final Answer: The final answer is $X$"; a model that copies only that
    line has answered: math-verify scores it and it is no parse error."""
    env = MathEnv(fewshot=4, mode="completion")
    row = {"id": "m1", "problem": "What is 1/2 + 1/2?", "answer": "1"}
    score = env.score(row, " We add: 1/2 + 1/2 = 1.\nFinal Answer: The final answer is $1$. I hope it is correct.")
    assert (score.success, score.info["parse_error"], score.info["exact_match"]) == (True, False, True)
    wrong = env.score(row, " So it is 2.\nFinal Answer: The final answer is $2$. I hope it is correct.")
    assert (wrong.success, wrong.info["parse_error"]) == (False, False)
