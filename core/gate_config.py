"""The comparison gate's settings (`gate:` in a config, or `evalflow compare`'s options): how far a metric may drop
against the baseline before the gate fails. tasks/analysis/gate.py applies them to a comparison."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from core.config_base import Strict

GateRuleName = Literal["ci", "absolute"]


class GateRule(Strict):
    """When a drop fails the gate. Rates are fractions (0.02 is two points)."""

    rule: GateRuleName = Field(
        default="ci",
        description="ci: fail when the delta's 95% CI lies wholly beyond a drop of max_drop (a significant drop "
        "larger than max_drop); absolute: fail when the delta itself is a drop larger than max_drop",
    )
    max_drop: float = Field(
        default=0.0, ge=0.0, description="the drop allowed, in the metric's units (rates: 0.02 is 2 points)"
    )
    metrics: list[str] | None = Field(
        default=None,
        description="the comparison rows gated, by key (accuracy, pass@1, pass@n, maj@n, mean_reward, "
        "ended_in_reasoning, an environment rate's key); default: every row",
    )

    @model_validator(mode="after")
    def _absolute_needs_a_threshold(self) -> GateRule:
        if self.rule == "absolute" and self.max_drop == 0.0:
            # any drop at all, noise included, would fail: almost surely not what was meant
            raise ValueError("max_drop: rule 'absolute' needs a drop to allow (e.g. 0.02); use rule 'ci' for 0")
        return self


class GateConfig(GateRule):
    """The default rule, and per benchmark (by its label) a rule of its own that replaces it."""

    benchmarks: dict[str, GateRule] = Field(default_factory=dict, description="per benchmark label: its own rule")

    def rule_for(self, benchmark: str) -> GateRule:
        return self.benchmarks.get(benchmark, self)
