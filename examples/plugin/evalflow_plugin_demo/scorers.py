"""A scorer kind for declarative tasks, shipped by a plugin: `within_percent`, registered under the entry-point
group `evalflow.scorers` in this package's pyproject.toml, so a task file names it like a built-in:

    scorer: {kind: within_percent, percent: 5}

Its options are the model's fields (validated by it: a task with `percent: -1` fails at load, naming the line);
`verdict` judges the answer the task's extractors found (None: they found none).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from evalflow import Context, ScorerKind


def _number(text: str) -> Decimal | None:
    try:
        value = Decimal(text.strip().replace(",", "").removeprefix("$"))
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


class WithinPercent(ScorerKind):
    """A number within `percent` percent of the reference (an estimate's tolerance); anything else is wrong."""

    kind: Literal["within_percent"]
    percent: Annotated[float, Field(gt=0, le=100)] = 1.0
    # The last number of the answer, unless the task names its own extractor.
    default_extractor: ClassVar[str] = "last_number"

    def verdict(self, answer: str | None, context: Context) -> bool:
        got, want = _number(answer or ""), _number(context.reference)
        if got is None or want is None:
            return False
        return abs(got - want) <= abs(want) * Decimal(str(self.percent)) / 100
