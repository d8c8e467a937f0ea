"""The report's judge section: the judge model, what it was asked and answered, and per judged metric its
verdicts, its unreadable answers and its calibration against the rollouts' labels."""

from __future__ import annotations

import plotly.graph_objects as go

from core.judge_record import JudgeInfo, Pairwise
from tasks.reporting.format import fmt_ci, fmt_num, fmt_rate
from tasks.reporting.parts import Section, Table

TITLE = "Judge"
PAIRWISE_TITLE = "Judge: pairwise against the baseline"


def judge_sections(judge: JudgeInfo | None) -> list[Section]:
    """The judge's sections: its verdicts and calibration, and the pairwise comparison if there was one."""
    if judge is None:
        return []
    return [judge_section(judge), *([pairwise_section(judge)] if judge.pairwise else [])]


def pairwise_section(judge: JudgeInfo) -> Section:
    header = ["benchmark", "baseline", "pairs", "wins", "ties", "losses", "win rate", "95% CI", "flipped", "unparsed",
              "failed"]  # fmt: skip
    rows = [
        [
            p.benchmark,
            p.baseline_run_id,
            f"{p.pairs:,}",
            f"{p.wins:,}",
            f"{p.ties:,}",
            f"{p.losses:,}",
            fmt_rate(p.win_rate),
            fmt_ci(p.ci_low, p.ci_high),
            fmt_rate(p.flips / p.pairs if p.pairs else None),
            f"{p.unparsed:,}",
            f"{p.failed:,}",
        ]
        for p in judge.pairwise
    ]
    note = (
        "Each pair (the same prompt and repeat in both runs) is shown to the judge twice, this run's answer first as "
        "A, then as B. A win: both orders prefer this run's answer; a loss: both prefer the baseline's; otherwise a "
        "tie. Flipped: the share of pairs whose verdict changed with the order (the judge's taste for a position). "
        "Win rate: (wins + ties / 2) / judged pairs, its 95% CI clustered by prompt. Unparsed pairs (no label read) "
        "and failed ones (judge errors) are left out of the rate."
    )
    if any(p.failed for p in judge.pairwise):
        note = "INCOMPLETE: the judge failed on some pairs; the rates cover the rest. " + note
    return Section(PAIRWISE_TITLE, Table(header, rows, note))


def judge_section(judge: JudgeInfo) -> Section:
    """Verdicts and calibration per judged metric, with what the judge did."""
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


def pairwise_figure(steps: list[int], results: list[Pairwise | None]) -> go.Figure | None:
    """A training run's judge win rate per step against each step's baseline (the step evaluated before it, under
    the same run name or deployment), with its 95% CI band; None when no step was judged pairwise."""
    judged = [(s, r) for s, r in zip(steps, results, strict=True) if r is not None and r.win_rate is not None]
    if not judged:
        return None
    xs = [s for s, _ in judged]
    fig = go.Figure()
    band = [(s, r.ci_low, r.ci_high) for s, r in judged if r.ci_low is not None and r.ci_high is not None]
    if band:
        fig.add_trace(go.Scatter(
            x=[s for s, _, _ in band] + [s for s, _, _ in reversed(band)],
            y=[hi for _, _, hi in band] + [lo for _, lo, _ in reversed(band)],
            fill="toself", fillcolor="rgba(99, 110, 250, 0.18)", line={"width": 0}, hoverinfo="skip",
            name="95% CI (clustered by prompt)",
        ))  # fmt: skip
    fig.add_trace(go.Scatter(
        x=xs, y=[r.win_rate for _, r in judged], mode="lines+markers", name="win rate",
        line={"color": "#636efa", "width": 3}, customdata=[[r.baseline_run_id, r.flips / r.pairs if r.pairs else 0]
                                                          for _, r in judged],
        hovertemplate="win rate %{y:.1%} against %{customdata[0]} (%{customdata[1]:.0%} flipped)<extra></extra>",
    ))  # fmt: skip
    fig.add_hline(y=0.5, line={"dash": "dot", "color": "#888"})  # no better, no worse than the baseline
    fig.update_layout(yaxis={"title": "win rate against the baseline", "range": [0, 1], "tickformat": ".0%"})
    return fig
