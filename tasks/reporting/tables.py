"""The run report's tables: every per-benchmark table, and the run's identity and stage timings.

Per-benchmark tables come from `BenchmarkMetrics` (environment metrics included), the run's from run_info.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any

from core import metrics_doc
from core.metrics_doc import BenchmarkMetrics, EnvMetric, PromptRow
from core.record import Provenance, RunInfo, RunStatus
from tasks.reporting.format import clip, fmt_ci, fmt_duration, fmt_interval, fmt_num, fmt_rate
from tasks.reporting.headline import bounds, format_env_value, uses_tools
from tasks.reporting.parts import Section, Table, count_table, kv_table

MAX_PROMPT_IDS = 50  # never/always-succeeding prompt ids listed in the report (all are in metrics.json)
ENV_METRICS_TITLE = "Environment metrics"


def _summary_table(bm: BenchmarkMetrics) -> Table:
    rep, ci, outcomes = bm.repeats, bm.ci, bm.prompt_outcomes
    return kv_table(
        [
            ("prompts", fmt_num(bm.n_prompts)),
            ("rollouts", fmt_num(bm.n_rollouts)),
            ("repeats per prompt", f"{rep['min']}–{rep['max']}" if rep["min"] != rep["max"] else str(rep["max"])),
            ("success rate", f"{fmt_rate(bm.accuracy)} ({bm.successes:,}/{bm.n_rollouts:,})"),
            ("success rate 95% CI (clustered by prompt)", fmt_interval(ci.accuracy)),
            ("standard error (lm-eval mean_stderr, ignores clustering)", fmt_num(bm.accuracy_stderr, 4)),
            ("mean reward", fmt_num(bm.mean_reward)),
            ("mean reward 95% CI (bootstrap over prompts)", fmt_interval(ci.mean_reward, rate=False)),
            ("parse-error rate", f"{fmt_rate(bm.parse_error_rate)} (CI {fmt_interval(ci.parse_error_rate)})"),
            ("errors", f"{bm.error_count:,} ({fmt_rate(bm.error_rate)}, CI {fmt_interval(ci.error_rate)})"),
            ("prompts never solved", fmt_num(outcomes.never_succeed.count)),
            ("prompts always solved", fmt_num(outcomes.always_succeed.count)),
        ]
    )


def _k_table(bm: BenchmarkMetrics) -> Table:
    """pass@k with Wilson CIs over prompts, and maj@k only where the environment declares it."""
    header = ["k", "pass@k", "pass@k 95% CI"] + (["maj@k", "maj@k 95% CI"] if bm.maj_at_k else [])
    rows = []
    for k in sorted(bm.pass_at_k, key=int):
        row = [k, fmt_rate(bm.pass_at_k[k]), fmt_interval(bm.ci.pass_at_k.get(k))]
        if bm.maj_at_k:
            row += [fmt_rate(bm.maj_at_k.get(k)), fmt_interval(bm.ci.maj_at_k.get(k))]
        rows.append(row)
    return Table(header, rows)


def _reward_table(bm: BenchmarkMetrics) -> Table:
    r = bm.reward
    mode = f"{fmt_num(r.mode)} ({fmt_rate(r.mode_share)} of rollouts)"
    stats = {"min": r.min, "max": r.max, "mean": r.mean, "median": r.median, "std": r.std}
    pairs = [(key, fmt_num(value)) for key, value in stats.items()]
    pairs += [("most common", mode), ("distinct values", fmt_num(bm.reward_values.distinct))]
    return kv_table(pairs)


def _reward_values_table(bm: BenchmarkMetrics, limit: int = 20) -> Table | None:
    values = bm.reward_values
    if not values.values:
        return None
    top = sorted(values.values, key=lambda v: (-v[1], v[0]))[:limit]
    note = f"{len(top)} most common of {values.distinct:,} distinct values" if len(top) < values.distinct else ""
    return Table(
        ["reward", "rollouts", "share"],
        [[fmt_num(v, 3), fmt_num(c), fmt_rate(c / bm.n_rollouts)] for v, c in top],
        note,
    )


def _outcomes_table(bm: BenchmarkMetrics) -> Table:
    rows = []
    for group, label in ((bm.prompt_outcomes.never_succeed, "never succeed"),
                         (bm.prompt_outcomes.always_succeed, "always succeed")):  # fmt: skip
        more = len(group.ids) - MAX_PROMPT_IDS
        listed = ", ".join(group.ids[:MAX_PROMPT_IDS]) + (f", … (+{more:,})" if more > 0 else "")
        rows.append([label, fmt_num(group.count), listed or "–"])
    rows.append(["some succeed", fmt_num(bm.prompt_outcomes.mixed.count), ""])
    return Table(["prompts that…", "count", "prompt ids"], rows)


def _tool_sections(bm: BenchmarkMetrics) -> list[Section]:
    t = bm.tool_calls
    summary = kv_table(
        [
            ("mean per rollout", fmt_num(t.mean, 2)),
            ("min–max", f"{fmt_num(t.min)}–{fmt_num(t.max)}"),
            ("total", fmt_num(t.total)),
            ("Pearson r (tool calls, reward)", fmt_num(t.reward_corr)),
            ("Pearson r 95% CI (bootstrap over prompts)", fmt_interval(bm.ci.tool_calls_reward_corr, rate=False)),
        ]
    )
    by_count = Table(
        [
            "tool calls",
            "rollouts",
            "prompts",
            "mean reward",
            "mean reward 95% CI (clustered by prompt)",
            "success rate",
        ],
        [
            [
                str(row.tool_calls),
                fmt_num(row.n),
                fmt_num(row.prompts),
                fmt_num(row.mean_reward),
                fmt_interval(row.mean_reward_ci, rate=False),
                fmt_rate(row.success_rate),
            ]
            for row in bm.reward_by_tool_calls
        ],
    )
    return [Section("Tool calls", summary), Section("Mean reward by tool-call count", by_count)]


def _env_sections(bm: BenchmarkMetrics) -> list[Section]:
    """Declared rates and means in one table with their CIs; each declared count as its own table."""
    values: list[EnvMetric] = [m for m in bm.env_metrics if m.kind != "counts"]
    sections = []
    if values:
        rows = [
            [m.label, format_env_value(m), fmt_interval(m.ci, rate=m.kind in ("rate", "items")),
             fmt_num(m.n) + (" items" if m.kind == "items" else ""), m.description]
            for m in values
        ]  # fmt: skip
        header = ["metric", "value", "95% CI", "rollouts", "about"]
        sections.append(Section(ENV_METRICS_TITLE, Table(header, rows)))
    for m in bm.env_metrics:
        if m.kind == "counts":
            table = count_table(m.key, m.counts or {}, bm.n_rollouts)
            sections.append(Section(m.label, Table(table.header, table.rows, m.description)))
    return sections


def _quantile(bm: BenchmarkMetrics, name: str, key: str) -> float | None:
    dist = bm.distributions.get(name)
    return dist.quantiles.get(key) if dist else None


def _tokens_table(bm: BenchmarkMetrics) -> Table:
    t = bm.tokens
    rows = []
    for label, mean, total in (("prompt", t.prompt_mean, t.prompt_total),
                               ("completion", t.completion_mean, t.completion_total)):  # fmt: skip
        quantiles = (fmt_num(_quantile(bm, f"{label}_tokens", q), 0) for q in ("min", "p50", "p95", "max"))
        rows.append([label, fmt_num(mean, 1), fmt_num(total), *quantiles])
    return Table(["", "mean", "total", "min", "p50", "p95", "max"], rows)


def _reasoning_sections(bm: BenchmarkMetrics) -> list[Section]:
    """A reasoning model's thinking: how often it was cut off, how long it thought, and whether longer helped."""
    r = bm.reasoning
    if r is None:
        return []
    lo, hi = bounds(r.ended_in_reasoning_ci)
    rows = [
        ["rollouts that reasoned", f"{fmt_num(r.with_reasoning)} of {fmt_num(bm.n_rollouts)}"],
        ["truncated while reasoning (no answer, reward 0)",
         f"{fmt_num(r.ended_in_reasoning)} ({fmt_rate(r.ended_in_reasoning_rate)}, 95% CI {fmt_ci(lo, hi)}); "
         f"{fmt_num(r.at_limit)} at the token limit"],
        ["reasoning tokens, mean", fmt_num(r.reasoning_tokens_mean, 1)],
        ["answer tokens, mean", fmt_num(r.answer_tokens_mean, 1)],
        ["reasoning share of generated tokens", fmt_rate(r.reasoning_share)],
    ]  # fmt: skip
    note = (
        ""
        if r.counted == r.with_reasoning
        else (f"token figures over the {fmt_num(r.counted)} rollouts whose reasoning tokens the server counted")
    )
    sections = [Section("Reasoning", Table(["", "value"], rows, note))]
    if r.by_length:
        sections.append(
            Section(
                "Accuracy by reasoning length",
                Table(
                    ["reasoning tokens", "rollouts", "prompts", "accuracy", "95% CI"],
                    [
                        [
                            f"{b.low:,} to {b.high:,}",
                            fmt_num(b.n),
                            fmt_num(b.prompts),
                            fmt_rate(b.accuracy),
                            fmt_ci(*bounds(b.ci)),
                        ]
                        for b in r.by_length
                    ],
                    "quartiles of the rollouts' reasoning length; CI clustered by prompt",
                ),
            )
        )
    return sections


def _latency_table(bm: BenchmarkMetrics) -> Table:
    lat = bm.latency_s
    values = {"p50": lat.p50, "p90": lat.p90, "p99": lat.p99, "mean": lat.mean, "max": lat.max}
    return Table(list(values), [[fmt_num(v, 2) for v in values.values()]])


def worst_prompts(bm: BenchmarkMetrics) -> list[PromptRow]:
    """Per-prompt rows, most failing first (lowest success rate, then lowest mean reward)."""
    return sorted(bm.per_prompt, key=lambda p: (p.success_rate, p.mean_reward, p.prompt_id))


def prompt_table(bm: BenchmarkMetrics, limit: int | None) -> Table:
    prompts = worst_prompts(bm)
    shown = prompts if limit is None else prompts[:limit]
    note = f"{len(shown)} of {len(prompts)} prompts shown, worst first" if len(shown) < len(prompts) else ""
    return Table(
        ["prompt", "n", "successes", "success rate", "mean reward", "reference", "top answer"],
        [
            [
                p.prompt_id,
                str(p.n),
                str(p.successes),
                fmt_rate(p.success_rate),
                fmt_num(p.mean_reward),
                clip(p.reference, 60),
                clip(p.top_answer, 60),
            ]
            for p in shown
        ],
        note,
    )


def benchmark_sections(bm: metrics_doc.BenchmarkMetrics) -> list[Section]:
    """Every per-benchmark table but the per-prompt one, titled, in report order."""
    if not isinstance(bm, BenchmarkMetrics):  # a core document: read it with the analysis's fields
        bm = BenchmarkMetrics.model_validate(bm.model_dump())
    sections = [
        Section("Summary", _summary_table(bm)),
        Section("pass@k and maj@k" if bm.maj_at_k else "pass@k", _k_table(bm)),
        Section("Reward", _reward_table(bm)),
    ]
    values = _reward_values_table(bm)
    if values:
        sections.append(Section("Reward values", values))
    sections.append(Section("Prompt outcomes", _outcomes_table(bm)))
    if uses_tools(bm):
        sections += _tool_sections(bm)
    sections += _env_sections(bm)
    sections += _reasoning_sections(bm)
    sections.append(Section("Finish reasons", count_table("finish reason", bm.finish_reasons, bm.n_rollouts)))
    if bm.errors:
        sections.append(Section("Errors", count_table("error", bm.errors, bm.n_rollouts)))
    sections += [Section("Tokens", _tokens_table(bm)), Section("Latency (s)", _latency_table(bm))]
    return sections


# ---------------------------------------------------------------------------------------------
# Run info


def _as_datetime(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _status_cell(status: RunStatus) -> str:
    """The status as its state (and, when rollouts failed, how many)."""
    failed = status.failed_rollouts
    if not failed:
        return status.state
    environment = f", {status.environment_errors} of them environment errors" if status.environment_errors else ""
    return f"{status.state} ({failed} of {status.planned_rollouts} rollouts failed{environment})"


# run_info fields shown in their own tables or notes, or only when set (a training run's step)
# `judge` has sections of its own (tasks/reporting/judge.py), above
_OWN_SECTIONS = {"config", "timings", "cpu_timings", "provenance", "shards", "long_prompts", "status", "judge"}
_WHEN_SET = {"training_run", "step", "rescored_from"}


def run_sections(run_info: RunInfo) -> list[Section]:
    """The run's identity (scalars, plus the wall-clock duration) and its stage timings."""
    scalars = []
    for key in RunInfo.model_fields:
        value = getattr(run_info, key)
        if key == "status":
            scalars.append((key, _status_cell(value)))
        elif key not in _OWN_SECTIONS and not (key in _WHEN_SET and value is None):
            scalars.append((key, "–" if value is None else str(value)))
    start, end = _as_datetime(run_info.started_at), _as_datetime(run_info.finished_at)
    if start and end:
        with contextlib.suppress(TypeError):  # naive vs aware timestamps: leave the duration out
            scalars.append(("duration", fmt_duration((end - start).total_seconds())))
    sections = [Section("Run", kv_table(scalars))]
    timings, cpu = run_info.timings, run_info.cpu_timings
    if timings:
        rows = [[stage, fmt_num(float(sec), 1)] for stage, sec in timings.items()]
        rows.append(["total", fmt_num(sum(float(sec) for sec in timings.values()), 1)])
        header = ["stage", "seconds"]
        if cpu:  # this process's CPU time per stage (records of older runs have none)
            for row in rows[:-1]:
                row.append(fmt_num(float(cpu[row[0]]), 1) if row[0] in cpu else "–")
            rows[-1].append(fmt_num(sum(float(sec) for sec in cpu.values()), 1))
            header.append("CPU seconds")
        sections.append(Section("Stage timings", Table(header, rows)))
    if run_info.shards:  # collected by child flow runs (collection.shards)
        rows = [[str(s.index + 1), str(s.batches), s.state, str(s.attempts), fmt_num(s.seconds, 1),
                 ", ".join(s.flow_runs)] for s in run_info.shards]  # fmt: skip
        header = ["shard", "batches", "state", "attempts", "seconds", "flow runs"]
        sections.append(Section("Shards", Table(header, rows)))
    sections += provenance_sections(run_info.provenance)
    return sections


def provenance_sections(record: Provenance | None) -> list[Section]:
    """What produced the run (code, runtime, server settings, hardware) and the data it read."""
    if record is None:
        return []
    code, runtime, server, hardware = record.evalflow, record.runtime, record.server, record.hardware
    commit_text = "–" if not code.commit else code.commit[:12] + (" (uncommitted changes)" if code.dirty else "")
    cpu = server.get("cpu")
    cpu = cpu if isinstance(cpu, dict) else {}
    pairs = [
        ("evalflow", f"{code.version or '–'}, commit {commit_text}"),
        ("python, prefect", f"{record.python or '–'}, {record.prefect or '–'}"),
        ("vLLM runtime", ", ".join(f"{k} {getattr(runtime, k)}" for k in ("flavor", "vllm", "torch", "transformers"))
         if runtime else "– (external server, or none started)"),
        ("server", ", ".join(f"{k} {v}" for k, v in server.items() if k != "cpu") or "–"),
        ("CPU server settings", cpu.get("reason") or "–"),
        ("hardware", f"{hardware.cpu or '–'}, {'–' if hardware.cores is None else hardware.cores} cores, "
         f"GPUs: {', '.join(hardware.gpus) or 'none'}"),
    ]  # fmt: skip
    sections = [Section("Provenance", kv_table(pairs))]
    if record.benchmarks:
        header = ["benchmark", "env version", "options", "max tokens", "dataset", "rows", "dataset hash",
                  "prompt template hash"]  # fmt: skip
        rows = [
            [b.benchmark, b.env_version, _options(b.options), fmt_num(b.max_tokens), str(b.dataset),
             fmt_num(b.rows), b.dataset_hash[:16], b.prompt_template_hash]
            for b in record.benchmarks
        ]  # fmt: skip
        sections.append(Section("Data and prompts", Table(header, rows)))
    return sections


def _options(options: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (options or {}).items()) or "–"
