"""Task environments: prompts (chat, completion, few-shot), extraction, scorers, fingerprint, pickling, code tests."""

from __future__ import annotations

import asyncio
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from envs import task_env
from envs.base import REPO_ROOT, DatasetError, MetricSpec, SingleTurnEnv
from envs.task_env import TaskEnv, task_env_class
from envs.task_extract import choice_letter, json_field, last_number, regex_find
from envs.task_spec import load_task_spec
from sandbox import runner

SCIENCE = REPO_ROOT / "examples" / "tasks" / "science_mc.yaml"
NO_SANDBOX = runner._static_problem(runner.default_interpreter()[0])
needs_sandbox = pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")
ROWS = [
    {"id": "a", "question": "What is 2+2?", "answer": "4"},
    {"id": "b", "question": "What is 3+3?", "answer": "6"},
    {"id": "c", "question": "What is 4+4?", "answer": "8"},
]


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def make(folder: Path, text: str, **options: Any) -> TaskEnv:
    jsonl(folder / "data.jsonl", ROWS)
    if not (folder / "shots.jsonl").exists():
        jsonl(folder / "shots.jsonl", ROWS)
    (folder / "task.yaml").write_text(text)
    return task_env_class(load_task_spec(folder / "task.yaml", where="x"))(**options)


# --- the multiple-choice example ------------------------------------------------------------------


def test_science_example_scores_letters() -> None:
    env = task_env_class(load_task_spec(SCIENCE, where="x"))()
    rows = env.read_rows()
    assert len(rows) == 22 and all(r["answer"] in "ABCD" and len(r["choices"]) == 4 for r in rows)
    assert (env.name, env.version, env.majority_vote, env.stop()) == ("science_mc", "1", True, None)
    assert env.default_source() == str(SCIENCE.parent / "science_mc.jsonl")
    for row in rows:
        wrong = next(letter for letter in "ABCD" if letter != row["answer"])
        right_text = row["choices"]["ABCD".index(row["answer"])]
        for completion, letter_ok, text_ok in [
            (f"Let me think.\nThe answer is ({row['answer']}).", True, True),
            (row["answer"], True, True),
            (f"**{row['answer']}**", True, True),
            (f"Answer: {wrong}", False, False),
            (f"The answer is ({wrong})", False, False),
            (right_text, False, True),  # no letter: only the text metric accepts the choice's text
            ("I am not sure.", False, False),
        ]:
            score = env.score(row, completion)
            assert (score.info["letter_correct"], score.info["text_correct"]) == (letter_ok, text_ok), completion
            assert score.success == letter_ok and score.reward == float(letter_ok)
    first = env.messages(rows[0])
    assert first == [
        {
            "role": "user",
            "content": "Which planet is closest to the Sun?\n\nA. Venus\nB. Mercury\nC. Earth\nD. Mars\n\n"
            'Answer with the letter of the correct choice, ending with "The answer is (X)".',
        }
    ]
    score = env.score(rows[0], "I am not sure.")
    assert (score.parsed_answer, score.info["parse_error"]) == (None, True)


def test_class_attributes_come_from_the_spec() -> None:
    cls = task_env_class(load_task_spec(SCIENCE, where="x"))
    assert issubclass(cls, SingleTurnEnv) and cls.name == "science_mc"
    assert [m.key for m in cls.metrics] == ["letter_correct", "text_correct", "parse_error"]
    assert cls.metrics[0] == MetricSpec(
        "letter_correct",
        "correct letter",
        "rate",
        True,
        "the choice letter found in the completion is the reference letter",
    )
    assert cls.lm_eval_metrics == () and cls.default_dataset_path() == SCIENCE.parent / "science_mc.jsonl"
    assert task_env_class(load_task_spec(SCIENCE, where="y")) is cls  # one class per spec content


# --- extractors and scorers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("The answer is (B).", "B"),
        ("the correct answer is **C** because", "C"),
        ("Answer: option D", "D"),
        ("(A)", "A"),
        ("B. Mercury is closest", "B"),
        ("A cat sat. I would pick (C) here", "C"),
        ("I pick D.", "D"),
        ("A cat is an animal", None),
        ("The answer is Apple", None),
    ],
)
def test_choice_letter(text: str, letter: str | None) -> None:
    assert choice_letter(text, "ABCD") == letter


def test_regex_last_number_and_json_field() -> None:
    assert regex_find(r"#### (\d+)", 1, "first", "#### 1 then #### 2") == "1"
    assert regex_find(r"#### (\d+)", 1, "last", "#### 1 then #### 2") == "2"
    assert regex_find(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", "first_matched", "last", "a 12 b 7") == "7"
    assert regex_find(r"x(y)?", 1, "first", "x") is None and regex_find("nope", 0, "first", "x") is None
    assert last_number("pay $1,234.50 or -3 or .5") == ".5" and last_number("costs $1,234.") == "1234"
    assert last_number("no digits") is None
    text = 'First {"answer": 1} then ```json\n{"answer": {"value": "x", "n": [3, true]}}\n``` {broken'
    assert json_field(text, "answer.value") == "x" and json_field(text, "answer.n.1") == "true"
    assert json_field(text, "answer") == '{"n": [3, true], "value": "x"}' and json_field(text, "missing") is None


TASK = """\
name: scorers
dataset: data.jsonl
prompt: "{{ question }}"
metrics:
  - {key: em, extract: whole, scorer: {kind: exact_match, ignore_case: true, ignore_punctuation: true}}
  - {key: em_regex, extract: whole, scorer: {kind: exact_match, regexes_to_ignore: ["^the answer is "]}}
  - {key: tol, extract: last_number, scorer: {kind: numeric, tolerance: {absolute: 0.1, relative: 0.01}}}
  - {key: exact, extract: last_number, scorer: numeric}
  - {key: contains, scorer: {kind: contains, ignore_case: true}}
  - {key: json, extract: {kind: json_field, key: answer}, scorer: exact_match}
"""


@pytest.mark.parametrize(
    ("completion", "answer", "true"),
    [
        ("FOUR!", "four", {"em", "contains"}),
        ("the answer is 4", "4", {"em_regex", "tol", "exact", "contains"}),
        ("about 4.05", "4", {"tol", "contains"}),
        ("about 1005", "1000", {"tol"}),  # 0.5% off: within 1% of the reference
        ("about 1020", "1000", set()),
        ('{"answer": "4"}', "4", {"tol", "exact", "json", "contains"}),
        ("4", "four", set()),  # numeric: a non-number reference fails
    ],
)
def test_scorers(tmp_path: Path, completion: str, answer: str, true: set[str]) -> None:
    env = make(tmp_path, TASK)
    info = env.score({"id": "a", "question": "q", "answer": answer}, completion).info
    assert {k for k in ("em", "em_regex", "tol", "exact", "contains", "json") if info[k]} == true


def test_math_verify_scorer_runs_on_a_main_thread(tmp_path: Path) -> None:
    env = make(tmp_path, 'name: m\ndataset: data.jsonl\nprompt: "{{ question }}"\nscorer: math_verify\n')
    row = {"id": "a", "question": "q", "answer": "\\frac{1}{2}"}
    assert env.score(row, "so \\boxed{0.5}").success and not env.score(row, "\\boxed{1/3}").success
    assert asyncio.run(env.ascore(row, "so \\boxed{\\dfrac{2}{4}}")).success  # in a worker process


# --- prompts -------------------------------------------------------------------------------------

FEWSHOT = "fewshot: {source: shots.jsonl, n: 2, target: 'The answer is {{ answer }}.'}\n"


def test_completion_mode_prompt_is_lm_eval_layout(tmp_path: Path) -> None:
    text = 'name: c\ndataset: data.jsonl\nprompt:\n  completion: "Question: {{ question }}\\nAnswer:"\n'
    text += 'stop: ["Question:", "\\n\\n"]\nscorer: {kind: numeric}\n' + FEWSHOT
    env = make(tmp_path, text, system_prompt="Solve these.")
    assert env.prompt(ROWS[2]) == (
        "Solve these.\n\nQuestion: What is 2+2?\nAnswer: The answer is 4.\n\n"
        "Question: What is 3+3?\nAnswer: The answer is 6.\n\nQuestion: What is 4+4?\nAnswer:"
    )
    # the row itself is never its own example
    assert env.prompt(ROWS[0]).count("What is 2+2?") == 1 and "What is 4+4?\nAnswer: The answer" in env.prompt(ROWS[0])
    assert env.stop() == ["Question:", "\n\n"]
    with pytest.raises(ValueError, match="plain-text prompt"):
        env.messages(ROWS[0])
    assert make(tmp_path, text, fewshot=0).prompt(ROWS[0]) == "Question: What is 2+2?\nAnswer:"


def test_chat_fewshot_turns_seeded_and_without_the_row(tmp_path: Path) -> None:
    text = 'name: c\ndataset: data.jsonl\nprompt:\n  messages:\n    - {role: system, content: "Be brief."}\n'
    text += '    - {role: user, content: "Q: {{ question }}"}\nscorer: {kind: numeric}\n'
    text += FEWSHOT.replace("n: 2", "n: 2, seed: 7")
    env = make(tmp_path, text)
    msgs = env.messages(ROWS[1])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[0]["content"] == "Be brief." and msgs[-1]["content"] == "Q: What is 3+3?"
    assert "What is 3+3?" not in msgs[1]["content"] + msgs[3]["content"]
    shots = env.shots(ROWS[1])
    assert msgs[1:5] == [
        {"role": "user", "content": f"Q: {shots[0]['question']}"},
        {"role": "assistant", "content": f"The answer is {shots[0]['answer']}."},
        {"role": "user", "content": f"Q: {shots[1]['question']}"},
        {"role": "assistant", "content": f"The answer is {shots[1]['answer']}."},
    ]
    assert env.messages(ROWS[1]) == make(tmp_path, text).messages(ROWS[1])  # deterministic
    unseeded = make(tmp_path, text.replace(", seed: 7", ""))
    assert [ex["id"] for ex in unseeded.shots(ROWS[2])] == ["a", "b"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fewshot": 4}, "fewshot must be an integer from 0 to 3, got 4"),
        ({"fewshot": True}, "fewshot must be an integer"),
        ({"shots": 1}, "unknown option 'shots'; options: fewshot, system_prompt"),
        ({"system_prompt": 3}, "system_prompt must be a string or None"),
        ({"allow_unsandboxed": True}, "unknown option 'allow_unsandboxed'"),
    ],
)
def test_bad_options(tmp_path: Path, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(tmp_path, 'name: c\ndataset: data.jsonl\nprompt: "{{ question }}"\nscorer: numeric\n' + FEWSHOT, **options)


def test_csv_dataset(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text('id,question,answer\na,"What is 2+2, really?",4\nb,What is 3+3?,6\n')
    env = make(tmp_path, 'name: c\ndataset: data.csv\nprompt: "{{ question }}"\nscorer: numeric\n')
    rows = env.read_rows()
    assert rows == [
        {"id": "a", "question": "What is 2+2, really?", "answer": "4"},
        {"id": "b", "question": "What is 3+3?", "answer": "6"},
    ]
    assert env.score(rows[0], "It is 4.").success
    (tmp_path / "data.csv").write_text("id,question,answer\na,q,4\nb,,6\n")
    with pytest.raises(DatasetError, match=r"data\.csv:3: missing or empty field 'question'"):
        env.read_rows()
    (tmp_path / "data.csv").write_text("id,question,answer\na,q,4,extra\n")
    with pytest.raises(DatasetError, match=r"data\.csv:2: not as many values as the header has columns"):
        env.read_rows()


# --- fingerprint and pickling --------------------------------------------------------------------

FP_TASK = 'name: f\ndataset: data.jsonl\nprompt: "{{ question }}"\nscorer: numeric\n' + FEWSHOT


def test_fingerprint_follows_the_task_file_and_the_fewshot_file(tmp_path: Path) -> None:
    base = make(tmp_path, FP_TASK).fingerprint()
    assert make(tmp_path, FP_TASK).fingerprint() == base  # stable
    assert make(tmp_path, FP_TASK + "description: edited\n").fingerprint() != base
    assert make(tmp_path, FP_TASK, fewshot=1).fingerprint() != base
    jsonl(tmp_path / "shots.jsonl", [*ROWS, {"id": "d", "question": "What is 5+5?", "answer": "10"}])
    edited = make(tmp_path, FP_TASK)
    assert edited.fingerprint() != base  # the examples used are the same; the file is not
    assert str(tmp_path / "shots.jsonl") in edited.prompt_templates()["files"]
    jsonl(tmp_path / "shots.jsonl", ROWS)
    assert make(tmp_path, FP_TASK).fingerprint() == base


def test_instances_pickle_by_their_spec(tmp_path: Path) -> None:
    env = make(tmp_path, FP_TASK, fewshot=1, system_prompt="sys")
    again = pickle.loads(pickle.dumps(env))
    assert type(again) is type(env) and again.options == {"fewshot": 1, "system_prompt": "sys"}
    assert again.fingerprint() == env.fingerprint() and again.messages(ROWS[0]) == env.messages(ROWS[0])
    task_env._CLASSES.clear()  # another process: the class is made again from the spec's JSON
    fresh = pickle.loads(pickle.dumps(env))
    assert type(fresh).name == "f" and fresh.fingerprint() == env.fingerprint()


# --- code tests ----------------------------------------------------------------------------------

CODE_TASK = """\
name: tiny_code
dataset: code.jsonl
prompt: "Write a Python function: {{ text }}"
majority_vote: false
metrics:
  - key: passed
    lm_eval_name: pass_at_1,none
    scorer: {kind: code_tests, tests_field: tests, timeout_s: 10}
"""
CODE_ROWS = [
    {"id": "add", "text": "add(a, b) returns a + b.", "tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]},
    {"id": "sq", "text": "square(x) returns x * x.", "tests": "assert square(3) == 9"},
]


def test_code_task_is_scored_asynchronously(tmp_path: Path) -> None:
    jsonl(tmp_path / "code.jsonl", CODE_ROWS)
    env = make(tmp_path, CODE_TASK)
    assert env.read_rows() == CODE_ROWS and env.majority_vote is False
    assert type(env).lm_eval_metrics == (("pass_at_1,none", "passed"),)
    assert type(env).asynchronous and not type(env).main_thread  # awaited in the sandbox, nothing on the main thread
    with pytest.raises(DatasetError, match=r"^w: 'tests' must be test code or a non-empty list of it"):
        env.validate_row({**CODE_ROWS[0], "tests": []}, "w")


@needs_sandbox
@pytest.mark.parametrize(
    ("row", "completion", "passed", "outcome"),
    [
        (0, "Here:\n```python\ndef add(a, b):\n    return a + b\n```", True, "pass"),
        (0, "```python\ndef add(a, b):\n    return a - b\n```", False, "fail"),
        (1, "def square(x):\n    return x * x\n", True, "pass"),
        (0, "abs = lambda x: 0\ndef add(a, b):\n    return 3\n", False, "fail"),
    ],
)
def test_code_tests_run_in_the_sandbox(tmp_path: Path, row: int, completion: str, passed: bool, outcome: str) -> None:
    jsonl(tmp_path / "code.jsonl", CODE_ROWS)
    env = make(tmp_path, CODE_TASK)
    score = asyncio.run(env.ascore(CODE_ROWS[row], completion))
    assert (score.success, score.info["passed"], score.info["outcomes"]["passed"]) == (passed, passed, outcome)
    assert score.parsed_answer is not None and score.parsed_answer.startswith(("def", "abs"))


def test_a_regex_that_backtracks_forever_fails_the_rollout_not_the_run() -> None:
    """A task's own regex runs under a time limit: catastrophic backtracking on a completion is an error of that
    call (a rollout's environment error, tasks.collection.env_calls), in seconds, never a hung event loop."""
    import time

    from envs.task_extract import REGEX_TIMEOUT_S, regex_find

    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"regex '\(a\|aa\)\+\$' ran over 2 s on a 61-character text"):
        regex_find("(a|aa)+$", 1, "first", "a" * 60 + "!")
    # unbounded, this regex takes ~fib(60) steps (years): any bound proves the cut, and a generous one does not
    # fail on a 2-core machine busy with two other test workers
    assert time.monotonic() - started < REGEX_TIMEOUT_S + 30
    assert regex_find(r"#### (\-?[0-9\.\,]+)", 1, "first", "so #### 1,234.") == "1,234."
