"""Plotly charts for every page: the shared template and error bars, and the run report's figures.

The run report's headline and per-benchmark figures are drawn from the metrics' histograms, never from
per-rollout arrays.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import plotly.graph_objects as go
from markupsafe import Markup

from core.metrics_doc import BenchmarkMetrics, Distribution, Interval, RunMetrics
from tasks.reporting.format import slug
from tasks.reporting.headline import HeadlineValue, bounds, headline_rows, uses_tools
from tasks.reporting.parts import Chart

MAX_PROMPT_BARS = 100  # more prompts than this: a histogram of per-prompt success rates instead of bars
REWARD_VALUE_BARS = 60  # up to this many distinct reward values: one bar per value, else the histogram

# plotly's built-in "plotly_white" is deep-copied into every figure (~0.1 s each): a small one instead.
_GRID = "#EBF0F8"
_COLORWAY = ["#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880", "#FF97FF"]


@functools.cache
def plotly_template() -> go.layout.Template:
    axis = {"gridcolor": _GRID, "zerolinecolor": _GRID, "linecolor": _GRID, "automargin": True}
    return go.layout.Template(
        layout={
            "paper_bgcolor": "white",
            "plot_bgcolor": "white",
            "font": {"color": "#2a3f5f"},
            "colorway": _COLORWAY,
            "xaxis": axis,
            "yaxis": axis,
        }
    )


# The mode bar shows on hover only, and the title sits below its strip, left-aligned: it never covers a title.
CHART_CONFIG = {"displaylogo": False, "responsive": True, "displayModeBar": "hover"}
TITLE_TOP_PX = 30  # the mode bar's strip at the top of the chart
MARGIN = {"l": 55, "r": 20, "t": 75, "b": 50}


def chart(fig: go.Figure, div_id: str, title: str, height: int = 360) -> Chart:
    """A figure as plotly's div + script, without plotly.js (the page links or inlines it once)."""
    fig.update_layout(
        title={"text": title, "x": 0, "xref": "paper", "xanchor": "left",
               "yref": "container", "y": 1, "yanchor": "top", "pad": {"t": TITLE_TOP_PX}},
        height=height,
        margin=MARGIN,
        template=plotly_template(),
    )  # fmt: skip
    div = fig.to_html(
        full_html=False, include_plotlyjs=False, div_id=div_id, default_height=f"{height}px", config=CHART_CONFIG
    )
    return Chart(div_id, title, Markup(div))  # plotly's own markup: no model text enters a figure's HTML


def error_bars(values: list[float | None], cis: list[tuple[float | None, float | None]]) -> dict[str, Any]:
    plus = [None if v is None or hi is None else hi - v for v, (_, hi) in zip(values, cis, strict=True)]
    minus = [None if v is None or lo is None else v - lo for v, (lo, _) in zip(values, cis, strict=True)]
    return {"type": "data", "array": plus, "arrayminus": minus, "visible": True}


def _number(value: HeadlineValue) -> float | None:
    """A headline cell that holds a rate or a mean (a float, or None where there is none)."""
    return value if isinstance(value, int | float) else None


def rate_axis(title: str, values: list[float | None], cis: list[tuple[float | None, float | None]]) -> dict[str, Any]:
    """A rate axis from 0 to the data's top (values and CI upper bounds) plus 10%, at most 105%: on a fixed
    0-100% axis a 0.6% bar cannot be seen. Ticks get decimals when the axis is that short."""
    top = max([v for v in values if v is not None] + [hi for _, hi in cis if hi is not None] + [0.005])
    tick = ".0%" if top >= 0.1 else ".1%" if top >= 0.01 else ".2%"
    return {"title": title, "range": [0, min(1.05, top * 1.1)], "tickformat": tick}


def headline_charts(metrics: RunMetrics) -> list[Chart]:
    """Rates per benchmark with 95% CIs, and mean reward with its bootstrap CI."""
    rows = headline_rows(metrics)
    if not rows:
        return []
    names = [r["benchmark"] for r in rows]
    benches = metrics.benchmarks

    def interval(bm: BenchmarkMetrics, key: str, n: str) -> Interval | None:
        if key == "accuracy":
            return bm.ci.accuracy
        if key == "pass@1":
            return bm.ci.pass_at_k.get("1")
        return (bm.ci.pass_at_k if key == "pass@n" else bm.ci.maj_at_k).get(n)

    rates = go.Figure()
    drawn: list[float | None] = []
    drawn_cis: list[tuple[float | None, float | None]] = []
    for key in ("accuracy", "pass@1", "pass@n", "maj@n"):
        values = [_number(r.get(key)) for r in rows]
        if all(v is None for v in values):  # maj@n where no environment declares it: no empty series
            continue
        cis = [bounds(interval(benches[str(r["benchmark"])], key, str(r["n"]))) for r in rows]
        rates.add_trace(go.Bar(x=names, y=values, name=key, error_y=error_bars(values, cis)))
        drawn += values
        drawn_cis += cis
    rates.update_layout(barmode="group", yaxis=rate_axis("rate", drawn, drawn_cis))
    rewards = [_number(r["mean_reward"]) for r in rows]
    reward_cis = [ci if isinstance(ci := r["mean_reward_ci"], tuple) else (None, None) for r in rows]
    reward = go.Figure(go.Bar(x=names, y=rewards, name="mean reward", error_y=error_bars(rewards, reward_cis)))
    reward.update_layout(yaxis_title="mean reward")
    return [
        chart(rates, "chart-headline-rates", "Headline rates (95% CI)"),
        chart(reward, "chart-headline-reward", "Mean reward (95% bootstrap CI over prompts)"),
    ]


def _histogram(dist: Distribution | None, name: str, opacity: float = 1.0) -> go.Bar | None:
    """A histogram precomputed in SQL (edges + counts) as a bar trace."""
    if not dist:
        return None
    edges, counts = dist.histogram.edges, dist.histogram.counts
    centers = [(a + b) / 2 for a, b in itertools.pairwise(edges)]
    widths = [b - a for a, b in itertools.pairwise(edges)]
    return go.Bar(x=centers, y=counts, width=widths, name=name, opacity=opacity)


def pass_maj_curve(bm: BenchmarkMetrics) -> go.Figure:
    """pass@k, and maj@k where the environment declares it (no maj@k series, nor its legend entry, otherwise)."""
    ks = sorted(bm.pass_at_k, key=int)
    curve = go.Figure()
    series = [(bm.pass_at_k, bm.ci.pass_at_k, "pass@k")]
    if any(v is not None for v in bm.maj_at_k.values()):
        series.append((bm.maj_at_k, bm.ci.maj_at_k, "maj@k"))
    for values_by_k, cis_by_k, label in series:
        values = [values_by_k.get(k) for k in ks]
        error_y = error_bars(values, [bounds(cis_by_k.get(k)) for k in ks])
        curve.add_trace(go.Scatter(x=[int(k) for k in ks], y=values, mode="lines+markers", name=label, error_y=error_y))
    curve.update_layout(
        showlegend=len(series) > 1,
        xaxis={"title": "k", "type": "log", "tickvals": [int(k) for k in ks]},
        yaxis={"range": [0, 1.05], "tickformat": ".0%"},
    )
    return curve


def pass_maj_title(bm: BenchmarkMetrics) -> str:
    return "pass@k and maj@k (95% CI)" if any(v is not None for v in bm.maj_at_k.values()) else "pass@k (95% CI)"


def _reward_figure(bm: BenchmarkMetrics) -> go.Figure:
    values = bm.reward_values
    if values.values and not values.truncated and len(values.values) <= REWARD_VALUE_BARS:
        reward = go.Figure(go.Bar(x=[v for v, _ in values.values], y=[c for _, c in values.values]))
    else:
        reward = go.Figure([t for t in [_histogram(bm.distributions.get("reward"), "reward")] if t])
    reward.update_layout(xaxis_title="reward", yaxis_title="rollouts", bargap=0.05)
    return reward


def success_counts(bm: BenchmarkMetrics) -> tuple[int, list[int]]:
    """(n, prompts per k): how many prompts succeeded k of n times, k = 0..n (n = the most repeats any
    prompt has; a prompt with fewer counts at its rate's nearest k/n)."""
    n = max([p.n for p in bm.per_prompt], default=1) or 1
    counts = [0] * (n + 1)
    for p in bm.per_prompt:
        if p.success_rate is not None:
            counts[round(p.success_rate * n)] += 1
    return n, counts


def prompt_figure(bm: BenchmarkMetrics) -> tuple[go.Figure, str]:
    prompts = sorted(bm.per_prompt, key=lambda p: (-(p.success_rate or 0.0), p.prompt_id))
    if len(prompts) <= MAX_PROMPT_BARS:
        per_prompt = go.Figure(go.Bar(x=[p.prompt_id for p in prompts], y=[p.success_rate for p in prompts]))
        per_prompt.update_layout(
            xaxis={"title": "prompt", "type": "category"},
            yaxis={"title": "success rate", "range": [0, 1.05], "tickformat": ".0%"},
        )
        return per_prompt, "Success rate per prompt"
    # one bar per k of n, centred on k/n: a histogram's bins would straddle the possible rates
    n, counts = success_counts(bm)
    ks = list(range(n + 1))
    per_prompt = go.Figure(
        go.Bar(
            x=[k / n for k in ks],
            y=counts,
            width=0.9 / n,
            customdata=[f"{k}/{n}" for k in ks],
            hovertemplate="%{customdata} successes: %{y:,} prompts<extra></extra>",
        )
    )
    tick = max(1, n // 10)  # at most ~11 labelled k/n
    per_prompt.update_layout(
        xaxis={"title": f"success rate (successes of {n})", "range": [-0.5 / n, 1 + 0.5 / n], "tickformat": ".0%",
               "tickvals": [k / n for k in ks[::tick]]},
        yaxis_title="prompts",
    )  # fmt: skip
    return per_prompt, f"Per-prompt success rates ({len(prompts):,} prompts)"


def _reasoning_figures(bm: BenchmarkMetrics) -> list[tuple[go.Figure, str, str]]:
    """Reasoning and answer tokens of the rollouts that reasoned, and accuracy by reasoning-length quartile."""
    if bm.reasoning is None:
        return []
    tokens = go.Figure()
    for col, label in (("reasoning_tokens", "reasoning"), ("answer_tokens", "answer")):
        trace = _histogram(bm.distributions.get(col), label, opacity=0.7)
        if trace:
            tokens.add_trace(trace)
    tokens.update_layout(barmode="overlay", xaxis_title="tokens", yaxis_title="rollouts")
    figures = [(tokens, "reasoning-tokens", "Reasoning and answer tokens per rollout")]
    buckets = bm.reasoning.by_length
    if buckets:
        values = [b.accuracy for b in buckets]
        by_length = go.Figure(
            go.Bar(
                x=[f"{b.low:,}-{b.high:,}" for b in buckets],
                y=values,
                error_y=error_bars(values, [bounds(b.ci) for b in buckets]),
                customdata=[b.n for b in buckets],
                hovertemplate="%{x} reasoning tokens: accuracy %{y:.1%} (%{customdata} rollouts)<extra></extra>",
            )
        )
        by_length.update_layout(
            xaxis_title="reasoning tokens (quartiles)",
            yaxis=rate_axis("accuracy", values, [bounds(b.ci) for b in buckets]),
        )
        figures.append((by_length, "accuracy-by-reasoning", "Accuracy by reasoning length (95% CI)"))
    return figures


def benchmark_charts(name: str, bm: BenchmarkMetrics) -> list[Chart]:
    """The benchmark's charts, all drawn from its metrics."""
    per_prompt, per_prompt_title = prompt_figure(bm)
    figures: list[tuple[go.Figure, str, str]] = [
        (pass_maj_curve(bm), "pass-maj-at-k", pass_maj_title(bm)),
        (_reward_figure(bm), "reward", "Reward distribution"),
        (per_prompt, "prompt-success", per_prompt_title),
    ]
    tokens = go.Figure()
    for col, label in (("prompt_tokens", "prompt"), ("completion_tokens", "completion")):
        trace = _histogram(bm.distributions.get(col), label, opacity=0.7)
        if trace:
            tokens.add_trace(trace)
    tokens.update_layout(barmode="overlay", xaxis_title="tokens", yaxis_title="rollouts")
    figures.append((tokens, "tokens", "Tokens per rollout"))

    latency = go.Figure([t for t in [_histogram(bm.distributions.get("latency_s"), "latency")] if t])
    latency.update_layout(xaxis_title="seconds", yaxis_title="rollouts", bargap=0.05)
    figures.append((latency, "latency", "Latency per rollout (s)"))

    figures += _reasoning_figures(bm)
    if uses_tools(bm):
        by_tools = bm.reward_by_tool_calls
        tools = go.Figure(
            go.Bar(
                x=[r.tool_calls for r in by_tools],
                y=[r.mean_reward for r in by_tools],
                customdata=[r.n for r in by_tools],
                hovertemplate="%{x} tool calls: mean reward %{y:.3f} (%{customdata} rollouts)<extra></extra>",
            )
        )
        tools.update_layout(xaxis_title="tool calls", yaxis_title="mean reward")
        figures.append((tools, "reward-by-tool-calls", "Mean reward by tool-call count"))
    key = slug(name)
    return [chart(fig, f"chart-{key}-{suffix}", title) for fig, suffix, title in figures]
