"""The environment of a declarative task: a TaskSpec (envs.task_spec) turned into a SingleTurnEnv class.

`task_env_class(spec)` returns a subclass with the class-level attributes the rest of evalflow reads (name,
version, metrics, ...); its instances pickle by the spec's JSON, since a class made at run time cannot be found
by name. Prompts are the spec's jinja templates over the row; scoring extracts an answer per metric and judges
it (envs.task_extract, envs.task_score). The fingerprint covers the whole spec and the few-shot file's bytes,
so editing either invalidates cached rollouts.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

from envs import main_thread
from envs.base import DatasetError, Env, MetricSpec, Score, SingleTurnEnv, canonical_json, run_to_completion
from envs.datasets import Opener, load_rows
from envs.task_extract import extract
from envs.task_kinds import Context
from envs.task_spec import (
    TEMPLATE_GLOBALS,
    Metric,
    TaskSpec,
    compile_template,
    is_local,
    template_variables,
)

MAX_ANSWER_CHARS = 4000
PARSE_ERROR = MetricSpec("parse_error", "no answer", "rate", description="no extractor of the reward found an answer")


def judge_metrics(judged: Iterable[tuple[str, str]]) -> tuple[MetricSpec, ...]:
    """What the report shows of each judged metric besides its pass rate: the share of rollouts whose judge
    answers gave no readable verdict, and the mean score (a scale's position, or the share of passing votes)."""
    return tuple(
        spec
        for key, label in judged
        for spec in (
            MetricSpec(
                f"{key}_unparsed",
                f"{label}: judge unparsed",
                "rate",
                description="rollouts whose judge answers held no verdict the rubric's spec could read",
            ),
            MetricSpec(
                f"{key}_score",
                f"{label}: judge score",
                "mean",
                description="the judge's mean score, from 0 (the scale's min, or fail) to 1",
            ),
        )
    )


def render(source: str, row: dict[str, Any], letters: str) -> str:
    """A template over the row's fields (and the choice `letters`)."""
    return compile_template(source).render({"letters": letters, **row})


def _empty(value: Any) -> bool:
    return (
        value is None
        or (isinstance(value, str) and not value.strip())
        or (isinstance(value, list | dict) and not value)
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value) if isinstance(value, list | dict) else str(value)


def metric_reference(spec: TaskSpec, metric: Metric, row: dict[str, Any]) -> str:
    """The reference a metric compares with: its template rendered, or its field's value as text."""
    if metric.reference is not None:
        return render(metric.reference, row, spec.letters)
    if metric.reference_field not in row:
        raise DatasetError(f"row {row.get(spec.id_field, '?')}: missing reference field {metric.reference_field!r}")
    return _text(row[metric.reference_field])


def _choices(spec: TaskSpec, row: dict[str, Any]) -> list[Any] | None:
    field = spec.choices.field if spec.choices else None
    return row.get(field) if field else None


def context(spec: TaskSpec, metric: Metric, row: dict[str, Any], allow_unsandboxed: bool = False) -> Context:
    """What a metric's scorer reads besides the answer (its reference only where the kind uses one)."""
    ref = metric_reference(spec, metric, row) if metric.resolved_scorer.uses_reference else ""
    return Context(row, ref, _choices(spec, row), spec.letters, allow_unsandboxed)


def score_row(
    spec: TaskSpec, row: dict[str, Any], completion: str, done: dict[str, tuple[str | None, bool]] | None = None
) -> Score:
    """Every metric's verdict (those in `done` already judged: the sandboxed ones) and the reward's fall-through.

    The reward, success and parsed answer come from the first metric of `spec.reward` whose extractors found an
    answer (else the last one's): gsm8k's boxed, else strict, else flexible. A top-level function, so that
    envs.main_thread can run it in a worker process.
    """
    verdicts = dict(done or {})
    for m in spec.metrics or ():
        if m.key not in verdicts:
            answer = extract(m.extract or (), completion, spec.letters)
            verdicts[m.key] = (answer, m.resolved_scorer.verdict(answer, context(spec, m, row)))
    reward = spec.reward or []
    key = next((k for k in reward if verdicts[k][0] is not None), reward[-1])
    parsed, success = verdicts[key]
    parsed = parsed[:MAX_ANSWER_CHARS] if parsed is not None else None
    info: dict[str, Any] = {k: ok for k, (_, ok) in verdicts.items()}
    info["parse_error"] = parsed is None
    info["answers"] = {k: a[:MAX_ANSWER_CHARS] if a is not None else None for k, (a, _) in verdicts.items()}
    return Score(reward=1.0 if success else 0.0, success=success, parsed_answer=parsed, info=info)


class _Examples(Env):
    """The few-shot source's rows, checked for what the prompt and target templates read."""

    name: ClassVar[str] = "few-shot examples"
    version: ClassVar[str] = "1"
    default_dataset: ClassVar[str] = ""

    def __init__(self, task: TaskEnv) -> None:
        super().__init__()
        self.task = task

    def validate_row(self, row: dict[str, Any], where: str) -> None:
        self.task.check_row(row, where, example=True)

    def prompt_id(self, row: dict[str, Any]) -> str:
        return self.task.prompt_id(row)

    def reference(self, row: dict[str, Any]) -> str:
        return ""

    def prompt_templates(self) -> dict[str, Any]:
        return {}


_EXAMPLES: dict[tuple[str, Any], tuple[dict[str, Any], ...]] = {}


class TaskEnv(SingleTurnEnv):
    """A declarative task's environment; `task_env_class` makes one subclass per spec.

    Options: `fewshot` (how many examples, overriding the spec's `fewshot.n`), `system_prompt` (replacing the
    spec's), and for tasks with code_tests `allow_unsandboxed` (run programs without the sandbox).
    """

    spec: ClassVar[TaskSpec]
    spec_json: ClassVar[str]
    # Whether a metric's scorer awaits (runs programs, asks a model), or needs math-verify's main thread.
    asynchronous: ClassVar[bool] = False
    main_thread: ClassVar[bool] = False

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        spec, code = self.spec, any(m.resolved_scorer.runs_code for m in self.spec.metrics or ())
        known = ("fewshot", "system_prompt", *(("allow_unsandboxed",) if code else ()))
        for option in options:
            if option not in known:
                raise ValueError(f"task {self.name!r}: unknown option {option!r}; options: {', '.join(known)}")
        self.system_prompt = options.get("system_prompt", spec.system_prompt)
        if self.system_prompt is not None and not isinstance(self.system_prompt, str):
            raise ValueError(f"task {self.name!r}: system_prompt must be a string or None, got {self.system_prompt!r}")
        if "system_prompt" in options and spec.prompt.messages and spec.prompt.messages[0].role == "system":
            raise ValueError(f"task {self.name!r}: system_prompt: the task's prompt.messages has its own")
        self.allow_unsandboxed = options.get("allow_unsandboxed", False)
        if not isinstance(self.allow_unsandboxed, bool):
            raise ValueError(f"task {self.name!r}: allow_unsandboxed must be true or false")
        self.files: dict[str, str] = {}
        self.examples = self._examples()
        self.example_ids = tuple(self.prompt_id(ex) for ex in self.examples)
        n = options.get("fewshot", spec.fewshot.n if spec.fewshot else 0)
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= len(self.examples):
            raise ValueError(
                f"task {self.name!r}: fewshot must be an integer from 0 to {len(self.examples)}, got {n!r}"
            )
        self.n_shots = n

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.spec_json, self.options))

    @classmethod
    def default_source(cls) -> str:
        """The spec's dataset: an absolute local path, or a URL / `hf-dataset:` spec as written."""
        return cls.spec.dataset

    @classmethod
    def default_dataset_path(cls) -> Path:
        """The dataset's path when it is a local file (a URL has none: see default_source)."""
        if not is_local(cls.spec.dataset):
            raise ValueError(
                f"task {cls.name!r}: its dataset {cls.spec.dataset} is no local file; use default_source()"
            )
        return Path(cls.spec.dataset)

    def read_rows(
        self,
        url: str | None = None,
        opener: Opener | None = None,
        limit: int | None = None,
        places: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """The dataset's rows (default: the spec's), validated."""
        return load_rows(url or self.default_source(), self, opener, limit, places)

    def _examples(self) -> tuple[dict[str, Any], ...]:
        """The few-shot pool in sampling order (file order, or shuffled by the seed), read once per file version."""
        fewshot = self.spec.fewshot
        if fewshot is None:
            return ()
        stamp: Any = None
        if is_local(fewshot.source):
            data = Path(fewshot.source).read_bytes()
            self.files[fewshot.source] = stamp = hashlib.sha256(data).hexdigest()
        key = (self.spec_json, stamp)
        if key not in _EXAMPLES:
            rows = load_rows(fewshot.source, _Examples(self))
            if fewshot.seed is not None:
                random.Random(fewshot.seed).shuffle(rows)
            _EXAMPLES[key] = tuple(rows)
        return _EXAMPLES[key]

    def shots(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """The row's few-shot examples: the first n of the pool that are not the row itself."""
        pid, shots = self.prompt_id(row), []
        for ex, ex_id in zip(self.examples, self.example_ids, strict=True):
            if len(shots) == self.n_shots:
                break
            if ex_id != pid:
                shots.append(ex)
        return shots

    def check_row(self, row: dict[str, Any], where: str, example: bool = False) -> None:
        """The task's `fields` present and non-empty and every template rendering (a few-shot example: those its
        prompt and target read), so that a bad row fails at load, naming its place."""
        spec = self.spec
        if spec.id_field in row:
            pid = row[spec.id_field]
            if isinstance(pid, bool) or not isinstance(pid, str | int) or (isinstance(pid, str) and not pid.strip()):
                raise DatasetError(f"{where}: {spec.id_field!r} must be a non-empty string or an integer, got {pid!r}")
        if example:
            templates = {at: t for at, t in spec.templates().items() if at.startswith(("prompt.", "fewshot."))}
            needed = set().union(*map(template_variables, templates.values())) - set(TEMPLATE_GLOBALS)
        else:
            templates, needed = spec.row_templates(), set(spec.fields or ())
        for field in sorted(needed):
            if _empty(row.get(field)):
                raise DatasetError(
                    f"{where}: missing or empty field {field!r}, which the task's templates use; "
                    f"the row has: {', '.join(sorted(row)) or 'nothing'}"
                )
        for at, template in templates.items():
            try:
                render(template, row, spec.letters)
            except Exception as e:
                raise DatasetError(f"{where}: {at}: cannot render: {type(e).__name__}: {e}") from e
        if not example:
            self._check_scoring(row, where)

    def _check_scoring(self, row: dict[str, Any], where: str) -> None:
        spec = self.spec
        for i, m in enumerate(spec.metrics or ()):
            m.resolved_scorer.check_row(row, where)
            if not m.resolved_scorer.uses_reference:
                continue
            if m.reference_field is not None and row.get(m.reference_field) in (None, ""):
                raise DatasetError(f"{where}: missing reference field {m.reference_field!r} (metrics.{i}: {m.key})")
        field = spec.choices.field if spec.choices else None
        if field is not None:
            choices = row.get(field)
            if not isinstance(choices, list) or not 2 <= len(choices) <= len(spec.letters):
                raise DatasetError(
                    f"{where}: {field!r} must be a list of 2 to {len(spec.letters)} choices, got {choices!r}"
                )

    def validate_row(self, row: dict[str, Any], where: str) -> None:
        self.check_row(row, where)

    def prompt_id(self, row: dict[str, Any]) -> str:
        if self.spec.id_field in row:
            return str(row[self.spec.id_field])
        content = {f: row.get(f) for f in self.spec.fields or ()} or row
        return f"{self.name}-" + hashlib.sha256(canonical_json(content).encode()).hexdigest()[:16]

    def reference(self, row: dict[str, Any]) -> str:
        spec = self.spec
        if spec.reference is not None:
            return render(spec.reference, row, spec.letters)
        return _text(row.get(spec.reference_field or "", ""))

    def prompt_templates(self) -> dict[str, Any]:
        """The whole spec (paths resolved) and the few-shot file's sha256: editing either changes the fingerprint."""
        return {"task": canonical_json(self.spec.model_dump(mode="json")), "files": self.files}

    def _turn(self, row: dict[str, Any]) -> list[dict[str, str]]:
        prompt, letters = self.spec.prompt, self.spec.letters
        if prompt.user is not None:
            return [{"role": "user", "content": render(prompt.user, row, letters)}]
        return [
            {"role": m.role, "content": render(m.content, row, letters)}
            for m in prompt.messages or ()
            if m.role != "system"
        ]

    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        """The system turn(s), each example's turns and its target as the assistant's answer, then the row's."""
        spec = self.spec
        if spec.prompt.mode == "completion":
            raise ValueError(f"task {self.name!r} sends a plain-text prompt (see prompt()), not chat messages")
        head = [m for m in spec.prompt.messages or () if m.role == "system"]
        msgs = [{"role": "system", "content": render(m.content, row, spec.letters)} for m in head]
        if self.system_prompt:
            msgs.append({"role": "system", "content": self._system(row)})
        for ex in self.shots(row):
            msgs += [*self._turn(ex), {"role": "assistant", "content": self._target(ex)}]
        return msgs + self._turn(row)

    def _system(self, row: dict[str, Any]) -> str:
        # The spec's system prompt is a template; one given as an option is plain text.
        if "system_prompt" in self.options:
            return self.system_prompt or ""
        return render(self.system_prompt or "", row, self.spec.letters)

    def _target(self, ex: dict[str, Any]) -> str:
        assert self.spec.fewshot is not None
        return render(self.spec.fewshot.target, ex, self.spec.letters)

    def prompt(self, row: dict[str, Any]) -> str | None:
        """Completion mode: lm-eval's layout, each example `prompt + target_delimiter + target`, joined by the
        few-shot delimiter after a system prompt (stripped), if any; chat mode: None."""
        spec = self.spec
        if spec.prompt.completion is None:
            return None
        fewshot, template = spec.fewshot, spec.prompt.completion
        blocks = [
            render(template, ex, spec.letters) + (fewshot.target_delimiter if fewshot else "") + self._target(ex)
            for ex in self.shots(row)
        ]
        blocks.append(render(template, row, spec.letters))
        if self.system_prompt:
            blocks.insert(0, self._system(row).strip())
        return (fewshot.fewshot_delimiter if fewshot else "\n\n").join(blocks)

    def stop(self) -> list[str] | None:
        return list(self.spec.stop) if self.spec.stop else None

    async def ascore(self, row: dict[str, Any], completion: str) -> Score:
        """Asynchronous kinds first (programs in the sandbox, a judge), awaited; then the rest, in a worker
        process when one needs math-verify's main thread (envs.main_thread), else in place."""
        spec, done, outcomes = self.spec, dict[str, tuple[str | None, bool]](), dict[str, str]()
        details: dict[str, dict[str, Any]] = {}
        for m in spec.metrics or ():
            if m.resolved_scorer.asynchronous:
                answer = extract(m.extract or (), completion, spec.letters)
                verdict = await m.resolved_scorer.averdict(answer, context(spec, m, row, self.allow_unsandboxed))
                done[m.key] = (answer, verdict.correct)
                if verdict.outcome is not None:
                    outcomes[m.key] = verdict.outcome
                if verdict.details is not None:
                    details[m.key] = verdict.details
        if self.main_thread:
            score = await main_thread.acall(score_row, spec, row, completion, done)
        else:
            score = score_row(spec, row, completion, done)
        if outcomes:
            score.info["outcomes"] = outcomes
        if details:  # a judge's answers, and the keys of its metrics (judge_metrics)
            score.info["judge"] = details
            for m in spec.metrics or ():
                other = getattr(m.resolved_scorer, "calibrate_with", None)
                if m.key in details and other is not None:  # the rule's verdict: the label the judge is checked on
                    details[m.key]["label"] = score.info.get(other)
            for key, d in details.items():
                score.info[f"{key}_unparsed"] = d["samples"] > 0 and d["read"] == 0
                if d.get("score") is not None:
                    score.info[f"{key}_score"] = d["score"]
        return score

    def score(self, row: dict[str, Any], completion: str) -> Score:
        """The same verdict from synchronous code: in place (math-verify on this main thread when it is one)."""
        if self.asynchronous:
            return run_to_completion(self.ascore(row, completion))
        if self.main_thread:
            return main_thread.call(score_row, self.spec, row, completion)
        return score_row(self.spec, row, completion)


_CLASSES: dict[str, type[TaskEnv]] = {}


def task_env_class(spec: TaskSpec) -> type[TaskEnv]:
    """The environment class of a spec (one per spec content and process, so that instances unpickle to it)."""
    spec_json = spec.model_dump_json()
    if spec_json not in _CLASSES:
        metrics = spec.metrics or []
        namespace = {
            "__doc__": spec.description or f"The declarative task {spec.name!r}.",
            "__module__": __name__,
            "name": spec.name,
            "version": spec.version,
            "metrics": (
                *(MetricSpec(m.key, m.label or m.key, "rate", m.headline, m.description) for m in metrics),
                PARSE_ERROR,
                *judge_metrics((m.key, m.label or m.key) for m in metrics if m.resolved_scorer.uses_judge),
            ),
            "majority_vote": spec.majority_vote,
            "lm_eval_metrics": tuple((m.lm_eval_name, m.key) for m in metrics if m.lm_eval_name),
            "default_dataset": spec.dataset,
            "spec": spec,
            "spec_json": spec_json,
            "asynchronous": any(m.resolved_scorer.asynchronous for m in metrics),
            "uses_judge": any(m.resolved_scorer.uses_judge for m in metrics),
            "main_thread": any(m.resolved_scorer.needs_main_thread() for m in metrics),
        }
        _CLASSES[spec_json] = type(f"Task_{re.sub(r'[^A-Za-z0-9_]', '_', spec.name)}", (TaskEnv,), namespace)
    return _CLASSES[spec_json]


def _rebuild(spec_json: str, options: dict[str, Any]) -> TaskEnv:
    """Unpickle: the class from the spec's JSON (paths already resolved), then the instance from its options."""
    return task_env_class(TaskSpec.model_validate_json(spec_json))(**options)
