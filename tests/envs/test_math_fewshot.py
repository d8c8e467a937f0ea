"""MATH few-shot and completion modes (lm-eval minerva_math's prompt) and the minerva exact_match score."""

from __future__ import annotations

import json

import pytest

from envs.math import FEWSHOT_PATH, MathEnv
from envs.math_minerva import final_answer_line, minerva_answer, minerva_exact_match, normalize_final_answer

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


# Expected values cross-checked against lm-eval's minerva_math `normalize_final_answer` on these inputs.
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
    ],
)
def test_normalize_final_answer(raw: str, normalized: str) -> None:
    assert normalize_final_answer(raw) == normalized


def test_answer_extraction() -> None:
    text = "So $\\boxed{3}$.\nFinal Answer: The final answer is $7$. I hope it is correct."
    assert final_answer_line(text) == "$7$" and minerva_answer(text) == "$7$"  # the Final Answer line wins
    assert minerva_answer("We get \\boxed{\\frac{1}{2}}.") == "\\frac{1}{2}"  # else the last box
    assert final_answer_line("Final Answer: The final answer is $7$. ") == "$7$"  # cut right before the phrase
    assert minerva_answer("no answer here") is None
    assert not minerva_exact_match(None, "1")


@pytest.mark.parametrize(
    ("completion", "reward", "exact"),
    [
        ("Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.", 1.0, True),  # no box: the line
        ("$\\boxed{\\frac12}$\nFinal Answer: The final answer is $\\frac12$. I hope it is correct.", 1.0, True),
        ("The answer is $\\boxed{0.5}$.", 1.0, False),  # equal for math-verify, not as a string
        ("\\boxed{\\frac{1}{2}}\nFinal Answer: The final answer is $\\frac{1}{3}$. I hope it is correct.", 1.0, False),
    ],
)
def test_exact_match_and_reward_are_separate(completion: str, reward: float, exact: bool) -> None:
    score = MathEnv(fewshot=4, mode="completion").score(ROW, completion)
    assert (score.reward, score.info["exact_match"]) == (reward, exact)


def test_exact_match_is_a_headline_lm_eval_metric() -> None:
    spec = {m.key: m for m in MathEnv.metrics}["exact_match"]
    assert (spec.kind, spec.headline, spec.label) == ("rate", True, "exact_match (lm-eval minerva)")
    assert MathEnv.lm_eval_metrics == (("exact_match,none", "exact_match"), ("math_verify,none", "pass@1"))


def test_a_final_answer_line_without_a_box_is_scored_and_parsed() -> None:
    """The few-shot format ends with "Final Answer: The final answer is $X$"; a model that copies only that
    line has answered: math-verify scores it and it is no parse error."""
    env = MathEnv(fewshot=4, mode="completion")
    row = {"id": "m1", "problem": "What is 1/2 + 1/2?", "answer": "1"}
    score = env.score(row, " We add: 1/2 + 1/2 = 1.\nFinal Answer: The final answer is $1$. I hope it is correct.")
    assert (score.success, score.info["parse_error"], score.info["exact_match"]) == (True, False, True)
    wrong = env.score(row, " So it is 2.\nFinal Answer: The final answer is $2$. I hope it is correct.")
    assert (wrong.success, wrong.info["parse_error"]) == (False, False)
