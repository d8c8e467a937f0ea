"""The judge scorer kind without a model: how a judge's answers are read and voted on, how its rubric renders, what
a task file may say about it, and that scoring outside a judging phase fails as a judge error, never a verdict."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from envs.base import DatasetError
from envs.judge import (
    JsonVerdict,
    Judge,
    JudgeFailed,
    LabelVerdict,
    ScaleVerdict,
    judging,
    read_verdict,
    vote,
)
from envs.judge_score import JudgeScorer
from envs.task_env import task_env_class
from envs.task_kinds import Context
from envs.task_spec import TaskSpecError, load_task_spec

REPO_ROOT = Path(__file__).resolve().parents[2]
LABELS = LabelVerdict(kind="label", labels={"CORRECT": True, "INCORRECT": False})
SCALE = ScaleVerdict(kind="scale", min=1, max=10, pass_at=7)


@pytest.mark.parametrize(
    ("text", "value", "passed"),
    [
        ("CORRECT", "CORRECT", True),
        ("The answer is incorrect.", "INCORRECT", False),
        ("correct? No: INCORRECT", "INCORRECT", False),  # the last label named counts
        ("INCORRECTLY put, but CORRECT", "CORRECT", True),  # a label inside a word is no label
        ("I cannot tell.", None, None),
        ("", None, None),
    ],
)
def test_a_label_verdict_is_the_last_label_named(text: str, value: str | None, passed: bool | None) -> None:
    reading = read_verdict(LABELS, text)
    assert (reading.value, reading.passed) == (value, passed)


def test_a_scale_verdict_reads_the_last_number_in_range_and_passes_at_pass_at() -> None:
    assert read_verdict(SCALE, "Out of 10 I give it 7").passed is True
    assert read_verdict(SCALE, "Rating: 6.5").passed is False
    assert read_verdict(SCALE, "Rating: 6.5").score == pytest.approx(5.5 / 9)
    assert read_verdict(SCALE, "Rating: 11").passed is None  # off the scale: no verdict
    bracketed = ScaleVerdict(kind="scale", min=1, max=10, pass_at=7, pattern=r"\[\[(\d+)\]\]")
    assert read_verdict(bracketed, "Step 1 of 3 ... Rating: [[8]]").value == 8.0
    with pytest.raises(ValueError, match="pass_at within them"):
        ScaleVerdict(kind="scale", min=1, max=10, pass_at=11)


def test_a_json_verdict_reads_a_field_of_the_last_object() -> None:
    boolean = JsonVerdict(kind="json", field="correct")
    assert read_verdict(boolean, 'thinking {"x": 1} then {"correct": true}').passed is True
    assert read_verdict(boolean, '{"correct": "yes"}').passed is None
    assert read_verdict(boolean, "{broken").passed is None
    scored = JsonVerdict(kind="json", field="score", min=0, max=1, pass_at=0.5)
    assert read_verdict(scored, '{"score": 0.8}').passed is True
    labelled = JsonVerdict(kind="json", field="verdict", labels={"A": True, "B": False})
    assert read_verdict(labelled, '{"verdict": "b"}').passed is False
    with pytest.raises(ValueError, match="needs min, max and pass_at"):
        JsonVerdict(kind="json", field="score", min=0)


def test_samples_vote_by_majority_a_tie_fails_and_by_mean_on_the_scale() -> None:
    read = [read_verdict(LABELS, t) for t in ("CORRECT", "CORRECT", "INCORRECT", "dunno")]
    assert vote(read, "majority", LABELS).passed is True and vote(read, "majority", LABELS).read == 3
    tie = [read_verdict(LABELS, t) for t in ("CORRECT", "INCORRECT")]
    assert vote(tie, "majority", LABELS).passed is False
    assert vote([read_verdict(LABELS, "?")], "majority", LABELS) == vote([], "majority", LABELS)
    assert vote([], "mean", LABELS).passed is False and vote([], "mean", LABELS).read == 0
    scale = [read_verdict(SCALE, t) for t in ("8", "6")]  # mean 7: passes at 7
    assert vote(scale, "mean", SCALE).passed is True and vote(scale, "mean", SCALE).value == 7.0
    assert vote([read_verdict(SCALE, t) for t in ("8", "5")], "mean", SCALE).passed is False


class Scripted(Judge):
    """A judge whose answers the test gives (a stand-in for the model: the mechanics around it are under test)."""

    fingerprint = "scripted"

    def __init__(self, answers: list[str]) -> None:
        self.answers, self.asked = answers, []

    async def ask(self, messages: list[dict[str, str]], sample: int = 0) -> str:
        self.asked.append((messages, sample))
        return self.answers[sample % len(self.answers)]


def scorer(**extra: object) -> JudgeScorer:
    return JudgeScorer.model_validate({
        "kind": "judge", "rubric": "Q: {{ question }} R: {{ reference }} A: {{ answer }}",
        "parse": {"kind": "label", "labels": {"CORRECT": True, "INCORRECT": False}}, **extra,
    })  # fmt: skip


def test_the_rubric_renders_row_answer_and_reference_and_n_samples_are_asked_and_kept() -> None:
    judge = Scripted(["CORRECT", "INCORRECT", "CORRECT"])
    context = Context({"question": "2+2?", "answer": "4"}, "4", None, "ABCD")
    with judging(judge):
        verdict = asyncio.run(scorer(samples=3, system="Grade.").averdict("It is 4", context))
    assert judge.asked[0][0] == [
        {"role": "system", "content": "Grade."},
        {"role": "user", "content": "Q: 2+2? R: 4 A: It is 4"},
    ]
    assert [s for _, s in judge.asked] == [0, 1, 2]
    assert verdict.correct is True and verdict.outcome == "judged"
    assert verdict.details is not None
    assert verdict.details["texts"] == ["CORRECT", "INCORRECT", "CORRECT"] and verdict.details["read"] == 3


def test_no_answer_asks_no_judge_and_an_unreadable_judge_is_a_fail() -> None:
    judge = Scripted(["I refuse"])
    context = Context({"question": "q"}, "r", None, "ABCD")
    with judging(judge):
        none = asyncio.run(scorer().averdict(None, context))
        unread = asyncio.run(scorer().averdict("a", context))
    assert none.correct is False and none.outcome == "no_answer" and len(judge.asked) == 1
    assert unread.correct is False and unread.outcome == "unparsed"


def test_scoring_outside_a_judging_phase_fails_as_a_judge_error() -> None:
    with pytest.raises(JudgeFailed, match="set `judge:` in the run config"):
        asyncio.run(scorer().averdict("a", Context({"question": "q"}, "r", None, "ABCD")))


def test_a_rows_human_label_is_read_and_a_bad_one_fails_at_load() -> None:
    s = scorer(label_field="human")
    assert [s.human_label({"human": v}) for v in (True, "correct", "INCORRECT", "no", 1)] == [
        True, True, False, False, True,
    ]  # fmt: skip
    with pytest.raises(DatasetError, match="row 3: 'human' \\(label_field\\) must be true/false"):
        s.check_row({"question": "q", "human": "maybe"}, "row 3")
    with pytest.raises(DatasetError, match="the judge's rubric cannot render"):
        scorer().check_row({}, "row 1")


def test_a_task_with_a_judge_metric_declares_its_judge_metrics_and_checks_calibrate_with(tmp_path: Path) -> None:
    spec = load_task_spec(REPO_ROOT / "examples/tasks/judged_qa.yaml", where="judged_qa.yaml")
    env = task_env_class(spec)
    assert env.uses_judge and env.asynchronous
    keys = [m.key for m in env.metrics]
    assert keys[:2] == ["judge_correct", "contains_reference"]
    assert {"judge_correct_unparsed", "judge_correct_score"} <= set(keys)
    bad = (
        (REPO_ROOT / "examples/tasks/judged_qa.yaml")
        .read_text()
        .replace("calibrate_with: contains_reference", "calibrate_with: nothing")
    )
    (tmp_path / "bad.yaml").write_text(
        bad.replace("dataset: judged_qa.jsonl", f"dataset: {REPO_ROOT}/examples/tasks/judged_qa.jsonl")
    )
    with pytest.raises(TaskSpecError, match=r"calibrate_with.*names no other metric: 'nothing'"):
        load_task_spec(tmp_path / "bad.yaml", where="bad.yaml")


def test_a_judged_rollout_keeps_the_verdict_the_texts_and_the_rule_label() -> None:
    spec = load_task_spec(REPO_ROOT / "examples/tasks/judged_qa.yaml", where="judged_qa.yaml")
    env = task_env_class(spec)()
    row = {"id": "qa-01", "question": "What is the capital of France?", "answer": "Paris"}
    with judging(Scripted(["INCORRECT"])):
        score = asyncio.run(env.ascore(row, "Paris, of course."))
    assert score.success is False  # the judge's verdict is the reward, whatever the rule says
    assert score.info["contains_reference"] is True
    assert score.info["judge"]["judge_correct"]["label"] is True  # calibrate_with: the rule's verdict
    assert score.info["judge_correct_unparsed"] is False and score.info["judge_correct_score"] == 0.0
