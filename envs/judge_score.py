"""The `judge` scorer kind of declarative tasks: a jinja rubric over the row, the answer and the reference, sent to
the run's judge model (envs.judge) `samples` times; its answers read by the `parse` spec and voted on.

    metrics:
      - key: helpful
        scorer:
          kind: judge
          rubric: |
            Question: {{ question }}
            Reference: {{ reference }}
            Answer: {{ answer }}
            Is the answer correct? Reply CORRECT or INCORRECT.
          parse: {kind: label, labels: {CORRECT: true, INCORRECT: false}}
          samples: 3
          calibrate_with: exact        # optional: a rule metric's verdict as the label the judge is checked on
                                       # (or label_field: a row field holding a human verdict)

The verdict, each answer's text and how it was read go into the rollout's `info.judge.<metric>`; an answer no
verdict could be read from is counted in `<metric>_unparsed`, never as a pass.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from envs.base import DatasetError
from envs.judge import MAX_TEXT_CHARS, VerdictSpec, active_judge, ask_all, read_verdict, vote
from envs.task_kinds import Context, ScorerKind, Verdict
from envs.task_spec import Template, compile_template

# Row values a human verdict may take for calibration (besides the verdict's own labels).
_TRUE, _FALSE = {"true", "yes", "pass", "1", "correct"}, {"false", "no", "fail", "0", "incorrect"}


class JudgeScorer(ScorerKind):
    """An LLM judge's verdict on the answer, by a rubric (a jinja template; `answer`, `reference` and the row's
    fields are its variables), read (`parse`) as a label, a number on a scale, or JSON; `samples` answers voted on."""

    kind: Literal["judge"]
    rubric: Template
    system: Template | None = None  # the judge's system message
    parse: VerdictSpec  # how a judge answer is read: a label, a number on a scale, or JSON
    samples: Annotated[int, Field(ge=1, le=32)] = 1
    aggregate: Literal["majority", "mean"] = "majority"
    label_field: str | None = None  # a row field holding a human verdict (true/false or one of the labels)
    calibrate_with: str | None = None  # another metric of the task (a rule) whose verdict the judge is checked on
    default_extractor: ClassVar[str] = "whole"
    asynchronous: ClassVar[bool] = True
    uses_judge: ClassVar[bool] = True

    def messages(self, row: dict[str, Any], answer: str, reference: str) -> list[dict[str, str]]:
        """The judge's chat: the system message, if any, then the rubric rendered."""
        values = {**row, "answer": answer, "reference": reference}
        user = {"role": "user", "content": compile_template(self.rubric).render(values)}
        if self.system is None:
            return [user]
        return [{"role": "system", "content": compile_template(self.system).render(values)}, user]

    def check_row(self, row: dict[str, Any], where: str) -> None:
        try:
            self.messages(row, "", "")
        except Exception as e:
            raise DatasetError(f"{where}: the judge's rubric cannot render: {type(e).__name__}: {e}") from e
        if self.label_field is not None and self.human_label(row) is None:
            raise DatasetError(
                f"{where}: {self.label_field!r} (label_field) must be true/false or one of the verdict's labels, "
                f"got {row.get(self.label_field)!r}"
            )

    def human_label(self, row: dict[str, Any]) -> bool | None:
        """The row's own verdict (calibration), as pass/fail; None when absent or unreadable."""
        value = row.get(self.label_field) if self.label_field else None
        if isinstance(value, bool):
            return value
        text = str(value).strip().casefold() if value is not None else ""
        labels = getattr(self.parse, "labels", None) or {}
        for label, passed in labels.items():
            if text == label.casefold():
                return passed
        return True if text in _TRUE else False if text in _FALSE else None

    async def averdict(self, answer: str | None, context: Context) -> Verdict:
        label = self.human_label(context.row)
        if answer is None:  # nothing to judge: no judge request
            details = {"passed": False, "read": 0, "samples": 0, "value": None, "score": None, "label": label}
            return Verdict(False, "no_answer", details)
        texts = await ask_all(active_judge(), self.messages(context.row, answer, context.reference), self.samples)
        readings = [read_verdict(self.parse, text) for text in texts]
        result = vote(readings, self.aggregate, self.parse)
        details = {
            "passed": result.passed, "value": result.value, "score": result.score, "read": result.read,
            "samples": len(texts), "label": label, "texts": [t[:MAX_TEXT_CHARS] for t in texts],
            "readings": [r.value for r in readings],
        }  # fmt: skip
        outcome = "judged" if result.read else "unparsed"
        return Verdict(result.passed, outcome, details)
