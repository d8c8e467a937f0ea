"""GSM8K env: prompts (zero/few-shot, chat turns), references, and scoring of realistic completions."""

from __future__ import annotations

import json

import pytest

from envs.base import DatasetError
from envs.gsm8k import FEWSHOT_PATH, INSTRUCTION, GSM8KEnv

ROW = {
    "id": "gsm-0001",
    "question": "Ann has 3 bags of 4 apples. How many apples does she have?",
    "answer": "12",
}


def score(completion: str, row: dict | None = None):
    return GSM8KEnv().score(row or ROW, completion)


def test_zero_shot_prompt() -> None:
    msgs = GSM8KEnv().messages(ROW)
    assert msgs == [{"role": "user", "content": f"{ROW['question']}\n\n{INSTRUCTION}"}]
    assert "#### <number>" in INSTRUCTION


def test_system_prompt_comes_first() -> None:
    msgs = GSM8KEnv(system_prompt="You are a careful tutor.").messages(ROW)
    assert msgs[0] == {"role": "system", "content": "You are a careful tutor."}
    assert [m["role"] for m in msgs] == ["system", "user"]


@pytest.mark.parametrize("n", [0, 4, 8])
def test_fewshot_examples_become_alternating_turns(n: int) -> None:
    shots = [json.loads(line) for line in FEWSHOT_PATH.read_text().splitlines() if line.strip()]
    msgs = GSM8KEnv(fewshot=n, system_prompt="sys").messages(ROW)
    assert len(msgs) == 1 + 2 * n + 1
    assert [m["role"] for m in msgs[1:-1]] == ["user", "assistant"] * n
    for i, shot in enumerate(shots[:n]):
        assert msgs[1 + 2 * i]["content"] == f"{shot['question']}\n\n{INSTRUCTION}"
        assert msgs[2 + 2 * i]["content"] == shot["answer"]
        assert shot["answer"].rstrip().splitlines()[-1].startswith("#### ")
    assert msgs[-1]["content"].startswith(ROW["question"])


def test_shipped_fewshot_solutions_score_as_correct() -> None:
    env = GSM8KEnv()
    shots = [json.loads(line) for line in FEWSHOT_PATH.read_text().splitlines() if line.strip()]
    assert len(shots) == 8
    for shot in shots:
        assert env.score(shot, shot["answer"]).success, shot["id"]


@pytest.mark.parametrize("bad", [-1, 9, 2.0, True, "4"])
def test_bad_fewshot_option(bad: object) -> None:
    with pytest.raises(ValueError, match="fewshot"):
        GSM8KEnv(fewshot=bad)  # type: ignore[arg-type]


def test_fingerprint_tracks_options_and_is_stable() -> None:
    base = GSM8KEnv().fingerprint()
    assert base == GSM8KEnv(fewshot=0).fingerprint()
    assert len(base) == 64 and int(base, 16) >= 0
    others = {GSM8KEnv(fewshot=4).fingerprint(), GSM8KEnv(fewshot=8).fingerprint()}
    others.add(GSM8KEnv(system_prompt="x").fingerprint())
    assert len(others) == 3 and base not in others


def test_fingerprint_tracks_version(monkeypatch: pytest.MonkeyPatch) -> None:
    before = GSM8KEnv().fingerprint()
    monkeypatch.setattr(GSM8KEnv, "version", GSM8KEnv.version + "-next")
    assert GSM8KEnv().fingerprint() != before


def test_original_gsm8k_format() -> None:
    env = GSM8KEnv()
    row = {"question": "How many?", "answer": "First 2 * 500 = 1000.\nThen 1000 + 234 = 1234.\n#### 1,234"}
    env.validate_row(row, "f:1")
    assert env.reference(row) == "1234"
    assert env.prompt_id(row) == env.prompt_id(dict(row)) and env.prompt_id(row).startswith("gsm8k-")
    assert env.prompt_id(row) != env.prompt_id({**row, "question": "How many more?"})
    assert env.score(row, "So she has 1234 in total.\n#### 1234").success


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ({"id": "a", "answer": "1"}, "question"),
        ({"id": "a", "question": "  ", "answer": "1"}, "question"),
        ({"id": "a", "question": "q"}, "answer"),
        ({"id": "a", "question": "q", "answer": "twelve"}, "answer"),
        ({"id": "a", "question": "q", "answer": "so it is\n#### many"}, "answer"),
        ({"id": 5, "question": "q", "answer": "1"}, "id"),
        ({"id": "", "question": "q", "answer": "1"}, "id"),
    ],
)
def test_validate_row_rejects(row: dict, problem: str) -> None:
    with pytest.raises(DatasetError, match=rf"^data\.jsonl:7: .*'{problem}'"):
        GSM8KEnv().validate_row(row, "data.jsonl:7")


def test_correct_strict_answer() -> None:
    s = score("Ann has 3 bags with 4 apples each.\n3 * 4 = 12\nSo she has 12 apples.\n#### 12")
    assert (s.reward, s.success, s.parsed_answer) == (1.0, True, "12")
    assert s.info == {
        "exact_match,strict-match": True,
        "exact_match,flexible-extract": True,
        "strict_correct": True,
        "flexible_correct": True,
        "boxed_correct": False,
        "strict_answer": "12",
        "flexible_answer": "12",
        "boxed_answer": None,
        "parse_error": False,
    }
    json.dumps(s.info)


def test_wrong_strict_answer_is_decisive_even_if_flexible_matches() -> None:
    s = score("#### 11\nWait, 3 * 4 = 12")
    assert not s.success and s.parsed_answer == "11"
    assert s.info["flexible_correct"] and not s.info["strict_correct"]


def test_no_hashes_falls_back_to_flexible() -> None:
    s = score("3 bags * 4 apples = 12 apples. The answer is 12.")
    assert s.success and s.parsed_answer == "12"
    assert s.info["strict_answer"] is None and s.info["flexible_correct"]


def test_boxed_answer_takes_precedence() -> None:
    s = score("3 \\times 4 = 12, so the answer is $\\boxed{12}$.\n#### 13")
    assert s.success and s.parsed_answer == "12"
    assert s.info["boxed_correct"] and not s.info["strict_correct"]


def test_dollars_and_commas() -> None:
    row = {"id": "x", "question": "How much?", "answer": "1234"}
    s = score("The price is $1,000 + $234 = $1,234.\n#### $1,234", row)
    # `#### $...` misses lm-eval's strict pattern; the flexible filter still finds $1,234.
    assert s.info["strict_answer"] is None
    assert s.info["flexible_answer"] == "1234" and s.success


def test_decimal_form_of_integer_answer() -> None:
    assert score("#### 12.00").success


def test_negative_answer() -> None:
    row = {"id": "t", "question": "Temperature?", "answer": "-2"}
    assert score("7 - 9 = -2\n#### -2", row).success


def test_parse_error() -> None:
    s = score("I am not sure how to solve this problem.")
    assert s.parsed_answer is None and not s.success and s.reward == 0.0
    assert s.info["parse_error"] is True


def test_stop_is_none() -> None:
    assert GSM8KEnv().stop() is None


# --- plain-completion mode (lm-evaluation-harness's gsm8k prompt) ---


def shipped_fewshot() -> list[dict]:
    return [json.loads(line) for line in FEWSHOT_PATH.read_text().splitlines() if line.strip()]


def test_completion_prompt_zero_shot() -> None:
    env = GSM8KEnv(mode="completion")
    assert env.prompt(ROW) == f"Question: {ROW['question']}\nAnswer:"
    assert env.mode == "completion"


def test_completion_prompt_four_shot_is_lm_eval_layout() -> None:
    shots = shipped_fewshot()[:4]
    expected = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in shots)
    expected += f"Question: {ROW['question']}\nAnswer:"
    assert GSM8KEnv(mode="completion", fewshot=4).prompt(ROW) == expected
    # each example ends with its `#### N` line, the prompt with the open answer
    assert expected.count("\n#### ") == 4 and expected.endswith("\nAnswer:")


def test_completion_prompt_strips_and_puts_system_prompt_first() -> None:
    env = GSM8KEnv(mode="completion", system_prompt="Solve these problems.")
    row = {**ROW, "question": f"  {ROW['question']}\n"}
    assert env.prompt(row) == f"Solve these problems.\n\nQuestion: {ROW['question']}\nAnswer:"


def test_completion_stop_sequences() -> None:
    assert GSM8KEnv(mode="completion").stop() == ["Question:", "</s>", "<|im_end|>", "\n\n"]
    # the worked examples never contain a stop sequence, so the format they teach is reachable
    for shot in shipped_fewshot():
        assert "\n\n" not in shot["answer"].strip() and "Question:" not in shot["answer"]


def test_chat_mode_has_no_plain_prompt_and_completion_mode_no_messages() -> None:
    assert GSM8KEnv().prompt(ROW) is None
    assert GSM8KEnv(mode="chat").stop() is None
    with pytest.raises(ValueError, match="completion"):
        GSM8KEnv(mode="completion").messages(ROW)


def test_mode_enters_fingerprint_and_templates() -> None:
    chat, completion = GSM8KEnv(), GSM8KEnv(mode="completion")
    assert chat.fingerprint() != completion.fingerprint()
    assert completion.prompt_templates()["mode"] == "completion"
    assert completion.prompt_templates() != chat.prompt_templates()
    assert GSM8KEnv(mode="completion", fewshot=4).fingerprint() != completion.fingerprint()
    # an explicit default is the default: chat fingerprints (and so cached chat rollouts) did not change
    assert GSM8KEnv(mode="chat").fingerprint() == chat.fingerprint()
    assert chat.options == {"fewshot": 0, "system_prompt": None}


def test_mode_changes_the_batch_key() -> None:
    from core.config import SamplingConfig
    from tasks.collection.plan import batch_key

    keys = {batch_key(GSM8KEnv(mode=m), [ROW], [0, 1], "model", SamplingConfig()) for m in ("chat", "completion")}
    assert len(keys) == 2


@pytest.mark.parametrize("bad", ["Completion", "text", "", None, 1])
def test_bad_mode(bad: object) -> None:
    with pytest.raises(ValueError, match=r"gsm8k: mode must be one of chat, completion"):
        GSM8KEnv(mode=bad)  # type: ignore[arg-type]


def test_bad_mode_through_the_registry() -> None:
    from envs.registry import get_env

    with pytest.raises(ValueError, match="mode"):
        get_env("gsm8k", mode="base")
    assert get_env("gsm8k", mode="completion", fewshot=4).prompt(ROW).startswith("Question: ")


def test_completion_mode_scores_like_chat() -> None:
    completion = " Ann has 3 * 4 = 12 apples.\n#### 12"
    chat, plain = GSM8KEnv().score(ROW, completion), GSM8KEnv(mode="completion").score(ROW, completion)
    assert plain == chat and plain.success and plain.info["strict_correct"]
    boxed = GSM8KEnv(mode="completion").score(ROW, " So $\\boxed{12}$.")
    assert boxed.success and boxed.info["boxed_correct"]
    flexible = GSM8KEnv(mode="completion").score(ROW, " 3 bags of 4 is 12 apples")
    assert flexible.success and flexible.info["strict_answer"] is None
