"""The report's judge section: the judge model, what it was asked and answered, and per judged metric its
verdicts, its unreadable answers and its calibration against the rollouts' labels."""

from __future__ import annotations

from core.record import JudgeInfo
from tasks.reporting.format import fmt_num, fmt_rate
from tasks.reporting.parts import Section, Table

TITLE = "Judge"


def judge_section(judge: JudgeInfo | None) -> Section | None:
    """The section, or None for a run without a judge."""
    if judge is None:
        return None
    rows = []
    for m in judge.metrics:
        labelled = m.labelled
        rows.append([
            m.benchmark, m.metric, f"{m.judged:,}", fmt_rate(m.passed / m.judged if m.judged else None),
            fmt_rate(m.unparsed / m.judged if m.judged else None), f"{labelled:,}",
            fmt_rate((m.both_pass + m.judge_only) / labelled if labelled else None),
            fmt_rate((m.both_pass + m.label_only) / labelled if labelled else None),
            f"{m.both_pass} / {m.judge_only} / {m.label_only} / {m.both_fail}" if labelled else "",
            fmt_rate(m.agreement), fmt_num(m.kappa),
        ])  # fmt: skip
    started = f"; its server started in {judge.started_s:.0f} s" if judge.started_s is not None else ""
    note = (
        f"Judge {judge.model} ({judge.mode}): {judge.asked:,} answers asked, {judge.cached:,} from the judge cache, "
        f"{judge.requests:,} requests, {judge.failed:,} failed (each a judge error, never a verdict), "
        f"{judge.completion_tokens:,} tokens; judging took {judge.seconds:.0f} s{started}. Unparsed: no answer of "
        "the judge held a verdict the rubric's spec could read (a fail, never a pass). Calibration, on rollouts "
        "with a label (the row's label_field, or the calibrate_with metric's verdict): judge pass rate, label pass "
        "rate, both pass / judge only / label only / both fail, agreement and Cohen's kappa."
    )
    header = ["benchmark", "metric", "judged", "passed", "unparsed", "labelled", "judge pass", "label pass",
              "pass/judge only/label only/fail", "agreement", "kappa"]  # fmt: skip
    return Section(TITLE, Table(header, rows, note))
