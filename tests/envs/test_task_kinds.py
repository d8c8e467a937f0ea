"""Extractor and scorer kinds as registered pieces: evalflow's own through the entry-point groups like a plugin's, a
plugin's kind (a real dist-info on sys.path) used from a task file, and a broken registration failing in one line."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from envs import task_kinds
from envs.catalog import describe_kinds
from envs.task_env import task_env_class
from envs.task_extract import BoxedExtractor, extract
from envs.task_kinds import EXTRACTOR_GROUP, SCORER_GROUP, Context, ExtractorKind, ScorerKind, kind_names, kind_origin
from envs.task_score import ExactMatchScorer
from envs.task_spec import TaskSpecError, load_task_spec

BUILT_IN_EXTRACTORS = ["boxed", "choice_letter", "code", "json_field", "last_number", "regex", "whole"]
BUILT_IN_SCORERS = ["code_tests", "contains", "exact_match", "judge", "math_verify", "multiple_choice", "numeric"]

KIND_SOURCE = '''
from typing import ClassVar, Literal
from evalflow import Context, ExtractorKind, ScorerKind


class Shouted(ExtractorKind):
    """The first word in capitals."""

    kind: Literal["shouted"]

    def find(self, text: str, letters: str) -> str | None:
        return next((w.strip(".,!") for w in text.split() if len(w) > 1 and w.isupper()), None)


class SameLength(ScorerKind):
    """As long as the reference, give or take `slack` characters."""

    kind: Literal["same_length"]
    slack: int = 0
    default_extractor: ClassVar[str] = "shouted"

    def verdict(self, answer: str | None, context: Context) -> bool:
        return answer is not None and abs(len(answer) - len(context.reference)) <= self.slack


class Misnamed(ScorerKind):
    kind: Literal["another_name"]


class NotAKind:
    kind = "plain"
'''

TASK = """\
name: shout
dataset: rows.jsonl
prompt:
  user: "Say {{ word }} loudly."
reference_field: word
scorer: {kind: same_length, slack: 1}
"""


@pytest.fixture(autouse=True)
def fresh_registry() -> Iterator[None]:
    task_kinds.clear_cache()
    yield
    task_kinds.clear_cache()


def install(site: Path, entries: dict[str, dict[str, str]]) -> None:
    """A plugin as an installer leaves it: its module, and a dist-info with its entry points."""
    (site / "shout_kinds.py").write_text(KIND_SOURCE)
    info = site / "shout_kinds-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shout-kinds\nVersion: 0.1\n")
    groups = "".join(f"[{g}]\n" + "".join(f"{n} = {v}\n" for n, v in e.items()) for g, e in entries.items())
    (info / "entry_points.txt").write_text(groups)


def test_the_built_in_kinds_register_through_the_entry_point_groups_like_any_plugin() -> None:
    assert kind_names(EXTRACTOR_GROUP) == BUILT_IN_EXTRACTORS and kind_names(SCORER_GROUP) == BUILT_IN_SCORERS
    assert kind_origin(SCORER_GROUP, "exact_match") == "evalflow (envs.task_score:ExactMatchScorer)"
    assert task_kinds.load_kind(EXTRACTOR_GROUP, "boxed") is BoxedExtractor
    found, broken = describe_kinds()
    assert not broken and [k.name for k in found] == BUILT_IN_EXTRACTORS + BUILT_IN_SCORERS
    exact = next(k for k in found if k.name == "exact_match")
    assert (
        exact.options["fallback"] == '"[invalid]"' and exact.group == "scorer" and exact.summary.startswith("lm-eval")
    )


def test_a_kinds_options_are_validated_by_its_own_model(tmp_path: Path) -> None:
    (tmp_path / "rows.jsonl").write_text('{"id": "a", "word": "cat"}\n')
    bad = TASK.replace("scorer: {kind: same_length, slack: 1}", "scorer: {kind: exact_match, ignore_cases: true}")
    (tmp_path / "task.yaml").write_text(bad)
    with pytest.raises(TaskSpecError) as info:
        load_task_spec(tmp_path / "task.yaml", where="benchmarks.0.task")
    assert str(info.value) == (
        f"{tmp_path}/task.yaml:6: scorer.ignore_cases: unknown field 'ignore_cases' (did you mean 'ignore_case'?)"
    )


def test_a_plugins_kinds_are_found_by_name_and_score_a_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(
        tmp_path,
        {
            EXTRACTOR_GROUP: {"shouted": "shout_kinds:Shouted"},
            SCORER_GROUP: {"same_length": "shout_kinds:SameLength"},
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "rows.jsonl").write_text('{"id": "a", "word": "cat"}\n')
    (tmp_path / "task.yaml").write_text(TASK)
    spec = load_task_spec(tmp_path / "task.yaml", where="benchmarks.0.task")
    (metric,) = spec.metrics or []
    scorer, extractors = metric.resolved_scorer, metric.extract or []
    assert (
        isinstance(scorer, ScorerKind)
        and scorer.kind == "same_length"
        and scorer.model_dump()
        == {
            "kind": "same_length",
            "slack": 1,
        }
    )
    assert [e.kind for e in extractors] == ["shouted"]  # the kind's own default extractor, itself a plugin's
    env = task_env_class(spec)()
    row = {"id": "a", "word": "cat"}
    right, wrong, none = (env.score(row, t) for t in ("I say DOGS!", "I say HORSE.", "nothing loud"))
    assert (right.success, right.parsed_answer) == (True, "DOGS")
    assert (wrong.success, wrong.parsed_answer, none.success, none.parsed_answer) == (False, "HORSE", False, None)
    assert asyncio.run(env.ascore(row, "I say DOGS!")) == right
    # the spec round-trips through JSON (pickling an env, a worker process) with the plugin's kinds
    assert type(spec).model_validate_json(spec.model_dump_json()) == spec
    assert kind_origin(SCORER_GROUP, "same_length") == "shout-kinds (shout_kinds:SameLength)"
    assert "same_length" in [k.name for k in describe_kinds()[0]]


@pytest.mark.parametrize(
    ("entries", "scorer", "message"),
    [
        ({}, "{kind: same_lenght}", "scorer.kind: unknown scorer 'same_lenght' (did you mean 'same_length'?); known: "),
        (
            {"misnamed": "shout_kinds:Misnamed"},
            "{kind: misnamed}",
            "scorer.kind: scorer kind 'misnamed' (shout_kinds:Misnamed) must declare `kind: Literal['misnamed']`",
        ),
        (
            {"plain": "shout_kinds:NotAKind"},
            "plain",
            "scorer: scorer kind 'plain' (shout_kinds:NotAKind) is not a subclass of envs.task_kinds.ScorerKind",
        ),
        (
            {"gone": "shout_kinds:Gone"},
            "{kind: gone}",
            "scorer.kind: scorer kind 'gone' (shout_kinds:Gone) cannot be imported: AttributeError: ",
        ),
        ({}, "{slack: 2}", "scorer: missing 'kind'"),
        ({}, "{kind: same_length, slack: many}", "scorer.slack: Input should be a valid integer"),
    ],
    ids=["misspelt", "misnamed", "not a kind", "import fails", "no kind", "bad option"],
)
def test_a_broken_kind_fails_the_task_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entries: dict[str, str], scorer: str, message: str
) -> None:
    scorers = {"same_length": "shout_kinds:SameLength", **entries}
    install(tmp_path, {EXTRACTOR_GROUP: {"shouted": "shout_kinds:Shouted"}, SCORER_GROUP: scorers})
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "rows.jsonl").write_text('{"id": "a", "word": "cat"}\n')
    (tmp_path / "task.yaml").write_text(TASK.replace("{kind: same_length, slack: 1}", scorer))
    with pytest.raises(TaskSpecError) as err:
        load_task_spec(tmp_path / "task.yaml", where="benchmarks.0.task")
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{tmp_path}/task.yaml:6: {message}"), text
    if "unknown scorer" in message:
        assert text.endswith(", ".join(sorted([*BUILT_IN_SCORERS, *entries, "same_length"])))


def test_the_kind_protocol_defaults() -> None:
    """A synchronous kind answers `averdict` from `verdict`; extractors run in order, first answer wins."""
    context = Context(row={}, reference="Paris", choices=None, letters="ABCD")
    scorer = ExactMatchScorer(kind="exact_match", ignore_case=True)
    verdict = asyncio.run(scorer.averdict("paris", context))
    assert verdict.correct and verdict.outcome is None and scorer.verdict("Lyon", context) is False
    assert not scorer.needs_main_thread() and scorer.uses_reference and not scorer.asynchronous
    boxed = BoxedExtractor(kind="boxed")
    assert isinstance(boxed, ExtractorKind) and extract([boxed], "so \\boxed{42}.", "ABCD") == "42"
