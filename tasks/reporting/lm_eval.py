"""The lm-eval table: every benchmark's scores under lm-evaluation-harness's metric names, one row per
(setting, metric), as lm-eval prints them (a fraction with 4 decimals and its stderr).

Which scores map to which lm-eval metric is each environment's declaration (envs.base.Env.lm_eval_metrics);
a benchmark's environment comes from the run's provenance (a labelled setting such as gsm8k_8shot runs
the gsm8k environment). The stderr is lm-eval's `mean_stderr` (sample standard deviation / sqrt(n), the
rollouts taken as independent); instruction-level IFEval scores have none in lm-eval either ("N/A").
"""

from __future__ import annotations

import inspect
import math
from typing import Any

from core import metrics_doc
from core.metrics_doc import RunMetrics
from core.record import BenchmarkProvenance, RunInfo
from envs.registry import find_env
from tasks.reporting.parts import Table

NA = "N/A"
HEADER = ["benchmark", "setting", "lm-eval metric", "value", "stderr", "n"]
TITLE = "lm-eval metrics"


def benchmark_envs(run_info: RunInfo) -> dict[str, BenchmarkProvenance]:
    """Per benchmark key, its provenance record (environment name, options, max_tokens); runs without one
    (older runs) are keyed by their environment's name."""
    return {r.benchmark: r for r in run_info.provenance.benchmarks} if run_info.provenance else {}


def _defaults(env: type | None) -> dict[str, Any]:
    """The environment's option defaults (its constructor's), which say nothing about a setting."""
    if env is None:
        return {}
    params = inspect.signature(env).parameters.values()
    return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}


def _setting(record: BenchmarkProvenance | None, env: type | None = None) -> str:
    """The options that tell one setting from another (shots, prompt mode, the generation limit); other
    options left at the environment's defaults are not shown."""
    given, defaults = (record.options if record else {}), _defaults(env)
    options = {k: v for k, v in given.items() if k not in defaults or defaults[k] != v}
    parts = [f"{given['fewshot']}-shot"] if "fewshot" in given else []
    parts += [f"{k}={v}" for k, v in sorted(options.items()) if k not in ("fewshot", "system_prompt") and v is not None]
    if record is not None and record.max_tokens:
        parts.append(f"max_tokens={record.max_tokens}")
    return ", ".join(parts) or "defaults"


def _mean_stderr(p: float, n: int) -> float | None:
    """lm-eval's mean_stderr of a 0/1 score: sqrt(p (1 - p) / (n - 1))."""
    return math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else None


def _score(bm: metrics_doc.BenchmarkMetrics, source: str) -> tuple[float | None, float | str | None, int]:
    """(value, stderr or N/A, n) of one declared source."""
    if source == "pass@1":
        return bm.pass_at_k.get("1", bm.accuracy), bm.accuracy_stderr, bm.n_rollouts
    metric = next((m for m in bm.env_metrics if m.key == source), None)
    if metric is None or metric.value is None:
        return None, None, 0
    if metric.kind == "items":
        return metric.value, NA, metric.n
    return metric.value, _mean_stderr(metric.value, metric.n), metric.n


def _fmt(value: float | str | None) -> str:
    if value is None:
        return "–"
    return value if isinstance(value, str) else f"{value:.4f}"


def lm_eval_table(metrics: RunMetrics, run_info: RunInfo) -> Table | None:
    """The table, or None when no benchmark of the run declares lm-eval metrics (Tetris, say)."""
    records = benchmark_envs(run_info)
    rows, cut = [], []
    for key, bm in metrics.benchmarks.items():
        if bm.reasoning is not None and bm.reasoning.ended_in_reasoning:
            cut.append(f"{key} {bm.reasoning.ended_in_reasoning:,}")
        record = records.get(key)
        env = find_env((record.env_ref or record.env) if record else key)
        for name, source in env.lm_eval_metrics if env else ():
            value, stderr, n = _score(bm, source)
            rows.append([key, _setting(record, env), name, _fmt(value), _fmt(stderr), f"{n:,}"])
    if not rows:
        return None
    note = "lm-evaluation-harness's metric names and definitions (docs/guides/baselines.md)"
    if cut:  # lm-eval's think_end_token keeps a completion without the end tag whole: its thinking is scored
        note += (
            f". Rollouts truncated while reasoning ({', '.join(cut)}) are scored here as lm-eval scores them "
            "(with think_end_token, the whole unterminated text); evalflow's accuracy counts them as no answer"
        )
    return Table(HEADER, rows, note)
