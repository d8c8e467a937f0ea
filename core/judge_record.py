"""The judge's part of a run's record (metrics.json `run_info.judge`): what the judge did, its verdicts and
calibration per judged metric, and the pairwise comparison with the baseline."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JudgeMetric(_Record):
    """One judged metric of a benchmark (tasks/analysis/judge_stats.py): the judge's verdicts, the answers it
    gave no readable verdict in, and its agreement with the rollouts' labels (the calibration table)."""

    benchmark: str = Field(description="the benchmark's label")
    metric: str = Field(description="the judged metric's key")
    judged: int = Field(description="rollouts the judge was asked about (an answer was extracted)")
    unparsed: int = Field(description="of those, rollouts none of whose judge answers held a readable verdict")
    passed: int = Field(description="rollouts the judge passed")
    answers: int = Field(description="judge answers (samples per rollout, summed)")
    labelled: int = Field(description="judged rollouts with a label (label_field or calibrate_with) and a verdict")
    both_pass: int = Field(default=0, description="the judge and the label passed")
    judge_only: int = Field(default=0, description="the judge passed, the label failed")
    label_only: int = Field(default=0, description="the label passed, the judge failed")
    both_fail: int = Field(default=0, description="the judge and the label failed")
    agreement: float | None = Field(default=None, description="share of labelled rollouts where both agree")
    kappa: float | None = Field(default=None, description="Cohen's kappa of judge and label")


class Pairwise(_Record):
    """One benchmark of this run against its baseline, judged pair by pair in both orders (tasks/judging/pairwise.py):
    a win when both orders prefer this run's answer, a loss when both prefer the baseline's, else a tie."""

    benchmark: str = Field(description="the benchmark's label")
    baseline_run_id: str = Field(description="the run compared with")
    pairs: int = Field(description="(prompt, repeat) pairs both runs answered")
    wins: int = Field(default=0, description="pairs where both orders prefer this run's answer")
    ties: int = Field(default=0, description="pairs judged a tie, or whose verdict flipped with the order")
    losses: int = Field(default=0, description="pairs where both orders prefer the baseline's answer")
    flips: int = Field(default=0, description="pairs whose verdict changed with the order (counted as ties)")
    unparsed: int = Field(default=0, description="pairs with an answer of the judge no label could be read from")
    failed: int = Field(default=0, description="pairs the judge gave no answer for (judge errors): not in the rates")
    win_rate: float | None = Field(default=None, description="(wins + ties / 2) / judged pairs")
    ci_low: float | None = Field(default=None, description="95% CI of the win rate, clustered by prompt")
    ci_high: float | None = Field(default=None, description="its upper bound")


class JudgeInfo(_Record):
    """The run's judge model (flows/judging.py): which, how it was reached, and its answers in this run."""

    model: str = Field(description="the judge's served name")
    identity: str = Field(description="sha256 of the judge's model fingerprint, server settings and sampling")
    mode: str = Field(description="managed (started for the judging phase) or external")
    asked: int = Field(default=0, description="judge answers the run's scorers asked for")
    cached: int = Field(default=0, description="of those, answers found in the judge cache (no request)")
    requests: int = Field(default=0, description="requests sent to the judge (retries included)")
    failed: int = Field(default=0, description="answers the judge did not give (each a judge error)")
    completion_tokens: int = Field(default=0, description="tokens the judge generated")
    seconds: float = Field(default=0.0, description="the judging phase's wall time")
    started_s: float | None = Field(default=None, description="a managed judge server's start (none: not started)")
    metrics: list[JudgeMetric] = Field(default_factory=list, description="per judged metric: verdicts, calibration")
    pairwise: list[Pairwise] = Field(default_factory=list, description="per benchmark: against the baseline")
