"""Task files: every mistake fails at load in one line naming file:line and the field; paths resolve once."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from envs.base import DatasetError
from envs.task_env import task_env_class
from envs.task_extract import ChoiceLetterExtractor, RegexExtractor, WholeExtractor
from envs.task_score import ExactMatchScorer, NumericScorer
from envs.task_spec import TaskSpec, TaskSpecError, load_task_spec
from errors import EvalflowError

BASE = """\
name: t
dataset: data.jsonl
prompt:
  user: "{{ question }}"
scorer: exact_match
"""
ROWS = (
    '{"id": "a", "question": "What is 2+2?", "answer": "4"}\n{"id": "b", "question": "What is 3+3?", "answer": "6"}\n'
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "data.jsonl").write_text(ROWS)
    (tmp_path / "shots.jsonl").write_text(ROWS)
    return tmp_path


def write(folder: Path, text: str, name: str = "task.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def load_error(folder: Path, text: str) -> str:
    with pytest.raises(TaskSpecError) as info:
        load_task_spec(write(folder, text), where="benchmarks.0.task")
    message = str(info.value)
    assert "\n" not in message and info.value.kind == "config"
    return message.replace(str(folder), "DIR")


# (name, task file text, the message after "DIR/task.yaml:")
BROKEN = [
    (
        "unknown scorer",
        BASE.replace("scorer: exact_match", "scorer: {kind: exactmatch}"),
        "5: scorer.kind: unknown scorer 'exactmatch' (did you mean 'exact_match'?); known: code_tests, contains, "
        "exact_match, judge, math_verify, multiple_choice, numeric",
    ),
    (
        "unknown scorer shorthand",
        BASE.replace("scorer: exact_match", "scorer: exactmatch"),
        "5: scorer: unknown scorer 'exactmatch' (did you mean 'exact_match'?); known: code_tests,",
    ),
    (
        "bad regex",
        BASE + "extract: {kind: regex, pattern: '(unclosed'}\n",
        "6: extract.pattern: bad regex '(unclosed': missing ), unterminated subpattern",
    ),
    ("missing dataset file", BASE.replace("data.jsonl", "nope.jsonl"), "2: dataset: no such file: DIR/nope.jsonl"),
    (
        "template variable outside fields",
        BASE.replace("name: t", "name: t\nfields: [question]").replace("{{ question }}", "{{ questoin }}"),
        "5: prompt.user: the template uses 'questoin', which is not among fields (question)",
    ),
    (
        "template syntax error, on the template's own line",
        BASE.replace('  user: "{{ question }}"', "  user: |\n    Question:\n    {{ question }\n"),
        "6: prompt.user: template syntax error: unexpected '}'",
    ),
    (
        "unknown extractor",
        BASE + "extract: boxd\n",
        "6: extract: unknown extractor 'boxd' (did you mean 'boxed'?); known: boxed, choice_letter, code, json_field, "
        "last_number, regex, whole",
    ),
    (
        "unknown extractor in a list",
        BASE + "extract:\n  - boxed\n  - {kind: lastnumber}\n",
        "8: extract.1.kind: unknown extractor 'lastnumber'",
    ),
    (
        "more shots than examples",
        BASE + "fewshot:\n  source: shots.jsonl\n  n: 5\n  target: '{{ answer }}'\n",
        "8: fewshot.n: 5 shots, but DIR/shots.jsonl has 2 examples",
    ),
    (
        "duplicate metric keys",
        BASE + "metrics:\n  - key: a\n  - key: b\n  - key: a\n",
        "9: metrics.2.key: duplicate metric key 'a' (also metrics.0.key)",
    ),
    (
        "reward names no metric",
        BASE + "reward: [correct, nope]\n",
        "6: reward.1: names no metric: 'nope'; metrics: correct",
    ),
    ("reward, one name", BASE + "reward: nope\n", "6: reward: names no metric: 'nope'"),
    ("YAML syntax", BASE + "extract: [boxed\n", "7: invalid YAML: expected ',' or ']'"),
    ("not a mapping", "- a\n- b\n", "1: expected a mapping of task fields, got list"),
    (
        "misspelt field",
        BASE.replace("scorer: exact_match", "scorer:\n  kind: exact_match\n  ignorecase: true"),
        "7: scorer.ignorecase: unknown field 'ignorecase' (did you mean 'ignore_case'?)",
    ),
    ("missing field", "name: t\ndataset: data.jsonl\nscorer: exact_match\n", "1: prompt: missing required field"),
    (
        "regex group beyond the pattern's",
        BASE + "extract: {kind: regex, pattern: 'a(b)', group: 2}\n",
        "6: extract.group: the pattern has 1 group(s), not 2",
    ),
    ("duplicate YAML key", BASE + "name: u\n", "6: name: duplicate key"),
    ("bad name", BASE.replace("name: t", "name: 't t'"), "1: name: 't t' must be letters, digits and '_.-'"),
    (
        "two prompt kinds",
        BASE.replace('  user: "{{ question }}"', '  user: "{{ question }}"\n  completion: "Q: {{ question }}"'),
        "3: prompt: give exactly one of user, messages, completion (got user, completion)",
    ),
    (
        "a value of the wrong type",
        BASE.replace("scorer: exact_match", "scorer:\n  kind: exact_match\n  ignore_case: maybe"),
        "7: scorer.ignore_case: Input should be a valid boolean, unable to interpret input, got 'maybe'",
    ),
    (
        "unknown format",
        BASE.replace("data.jsonl", "data.txt"),
        "2: dataset: data.txt: expected a .jsonl, .parquet or .csv",
    ),
    (
        "bad hf-dataset spec",
        BASE.replace("data.jsonl", "'hf-dataset:x?foo=1'"),
        "2: dataset: hf-dataset:x?foo=1: unknown parameter(s) foo",
    ),
    (
        "no scorer",
        BASE.replace("scorer: exact_match", ""),
        "1: scorer: missing: give a scorer, or metrics each with one",
    ),
    (
        "a metric without a scorer",
        BASE.replace("scorer: exact_match", "metrics:\n  - key: a\n    extract: boxed"),
        "6: metrics.0: no scorer",
    ),
    (
        "system prompt twice",
        BASE.replace(
            '  user: "{{ question }}"', "  messages:\n    - {role: system, content: s}\n    - {role: user, content: u}"
        )
        + "system_prompt: hi\n",
        "8: system_prompt: prompt.messages already starts with a system message",
    ),
]


@pytest.mark.parametrize(("text", "expected"), [(t, e) for _, t, e in BROKEN], ids=[n for n, _, _ in BROKEN])
def test_broken_task_files_fail_in_one_line_with_file_line_and_field(folder: Path, text: str, expected: str) -> None:
    assert load_error(folder, text).startswith(f"DIR/task.yaml:{expected}")


def test_a_relative_path_is_named_as_given_from_the_working_directory(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder)
    path = write(folder, BASE + "reward: nope\n")
    with pytest.raises(TaskSpecError, match=r"^task\.yaml:6: reward: "):
        load_task_spec(path, where="x")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("missing.yaml", "DIR/missing.yaml: task file not found (a relative path starts from the working directory)"),
        ("task.json", "DIR/task.json: a task file must end in .yaml or .yml"),
    ],
)
def test_missing_or_misnamed_task_file(folder: Path, path: str, message: str) -> None:
    with pytest.raises(TaskSpecError) as info:
        load_task_spec(folder / path, where="x")
    assert str(info.value).replace(str(folder), "DIR") == message


def test_an_empty_file_is_no_mapping(folder: Path) -> None:
    assert load_error(folder, "") == "DIR/task.yaml:1: expected a mapping of task fields, got NoneType"


def test_inline_task_errors_name_the_config_place(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(folder)
    for text, expected in [
        (BASE.replace("scorer: exact_match", "scorer: {kind: exactmatch}"), "scorer.kind: unknown scorer 'exactmatch'"),
        (BASE + "extract:\n  - boxed\n  - {kind: lastnumber}\n", "extract.1.kind: unknown extractor 'lastnumber'"),
        (BASE.replace("data.jsonl", "nope.jsonl"), f"dataset: no such file: {folder}/nope.jsonl"),
        ("name: t\ndataset: data.jsonl\nscorer: exact_match\n", "prompt: missing required field"),
    ]:
        with pytest.raises(TaskSpecError) as info:
            load_task_spec(yaml.safe_load(text), where="benchmarks.0.task")
        assert str(info.value).startswith(f"benchmarks.0.task.{expected}")
        assert isinstance(info.value, EvalflowError) and isinstance(info.value, ValueError)


def test_relative_paths_resolve_against_the_task_file_once(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (folder / "sub").mkdir()
    (folder / "sub" / "shots.jsonl").write_text(ROWS)
    text = (
        BASE.replace("data.jsonl", "../data.jsonl") + "fewshot: {source: shots.jsonl, n: 1, target: '{{ answer }}'}\n"
    )
    monkeypatch.chdir("/")
    spec = load_task_spec(write(folder / "sub", text), where="x")
    assert spec.dataset == str(folder / "data.jsonl")
    assert spec.fewshot is not None and spec.fewshot.source == str(folder / "sub" / "shots.jsonl")
    # loading the resolved spec again (a pickled env, say) changes nothing
    assert TaskSpec.model_validate_json(spec.model_dump_json()) == spec


def test_inline_paths_resolve_against_the_working_directory(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(folder)
    spec = load_task_spec(yaml.safe_load(BASE), where="benchmarks.0.task")
    assert spec.dataset == str(folder / "data.jsonl")


@pytest.mark.parametrize(
    "url", ["s3://bucket/gsm8k.jsonl", "hf://datasets/org/x/test.parquet", "hf-dataset:openai/gsm8k?config=main"]
)
def test_urls_are_kept_as_written(folder: Path, url: str) -> None:
    spec = load_task_spec(write(folder, BASE.replace("data.jsonl", f"'{url}'")), where="x")
    assert spec.dataset == url
    assert task_env_class(spec).default_source() == url


def test_defaults_are_filled_in(folder: Path) -> None:
    spec = load_task_spec(write(folder, BASE.replace("name: t", "name: t\nversion: 2")), where="x")
    assert (spec.version, spec.id_field, spec.fields, spec.reward, spec.majority_vote) == (
        "2",
        "id",
        ["question"],
        ["correct"],
        True,
    )
    [metric] = spec.metrics or []
    assert (metric.key, metric.label, metric.headline, metric.reference_field) == (
        "correct",
        "correct",
        False,
        "answer",
    )
    assert isinstance(metric.scorer, ExactMatchScorer) and metric.scorer.fallback == "[invalid]"
    assert metric.extract == [WholeExtractor(kind="whole")]


def test_extractor_defaults_follow_the_scorer(folder: Path) -> None:
    text = BASE.replace(
        "scorer: exact_match",
        "metrics:\n  - {key: n, scorer: {kind: numeric, tolerance: 0.5}}\n  - {key: mc, scorer: multiple_choice}\n"
        "  - key: r\n    scorer: exact_match\n    extract: {kind: regex, pattern: 'x'}",
    )
    n, mc, r = load_task_spec(write(folder, text), where="x").metrics or []
    assert n.extract is not None and n.extract[0].kind == "last_number"
    assert isinstance(n.scorer, NumericScorer) and n.scorer.tolerance.absolute == 0.5
    assert mc.extract == [ChoiceLetterExtractor(kind="choice_letter")]
    # no group in the pattern: the whole match; else group 1 (lm-eval's filters)
    assert r.extract == [RegexExtractor(kind="regex", pattern="x", group=0)]


def test_unknown_template_variable_without_fields_fails_on_the_first_row(folder: Path) -> None:
    spec = load_task_spec(write(folder, BASE.replace("{{ question }}", "{{ questoin }}")), where="x")
    env = task_env_class(spec)()
    with pytest.raises(DatasetError) as info:
        env.read_rows()
    assert str(info.value) == (
        f"{folder}/data.jsonl:1: missing or empty field 'questoin', which the task's templates use; "
        "the row has: answer, id, question"
    )


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"id": "a", "question": "  ", "answer": "4"}, "missing or empty field 'question'"),
        ({"id": "", "question": "q", "answer": "4"}, "'id' must be a non-empty string or an integer"),
        ({"id": "a", "question": "q"}, "missing reference field 'answer' (metrics.0: correct)"),
        ({"id": "a", "question": {"x": 1}, "answer": "4"}, None),  # any JSON value renders
    ],
)
def test_row_checks_name_the_place(folder: Path, row: dict[str, Any], message: str | None) -> None:
    env = task_env_class(load_task_spec(write(folder, BASE), where="x"))()
    if message is None:
        env.validate_row(row, "f.jsonl:3")
        return
    with pytest.raises(DatasetError, match=rf"^f\.jsonl:3: {re.escape(message)}"):
        env.validate_row(row, "f.jsonl:3")


def test_a_row_that_breaks_a_template_is_a_dataset_error(folder: Path) -> None:
    text = BASE.replace("{{ question }}", "{{ question.upper() }} {{ question[5] }}")
    env = task_env_class(load_task_spec(write(folder, text), where="x"))()
    with pytest.raises(DatasetError, match=r"^w: prompt.user: cannot render: UndefinedError: .*has no element 5"):
        env.validate_row({"id": "a", "question": "abc", "answer": "1"}, "w")


def test_templates_cannot_run_code_or_change_rows(folder: Path) -> None:
    for template in ("{{ question.__class__.__mro__ }}", "{{ choices.append(1) }}"):
        env = task_env_class(load_task_spec(write(folder, BASE.replace("{{ question }}", template)), where="x"))()
        with pytest.raises(DatasetError, match="SecurityError"):
            env.validate_row({"id": "a", "question": "q", "choices": [1], "answer": "1"}, "w")
