"""The report's lm-eval table: each labelled setting's scores under lm-eval's names, with its stderr."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from core.metrics_doc import RunMetrics
from core.record import RunInfo
from core.store import Store
from envs.registry import ENVS
from tasks.reporting.lm_eval import lm_eval_table
from tasks.reporting.report import write_report
from tests.tasks.conftest import benchmark_provenance, provenance, run_info

STRICT, FLEXIBLE = "exact_match,strict-match", "exact_match,flexible-extract"


def gsm8k_rows(make_rollout: Any, label: str, strict: list[bool], flexible: list[bool]) -> list[dict[str, Any]]:
    return [
        make_rollout(benchmark=label, prompt_id=f"p{i}", success=f, reward=float(f), info={STRICT: s, FLEXIBLE: f})
        for i, (s, f) in enumerate(zip(strict, flexible, strict=True))
    ]


def with_benchmarks(*records: dict[str, Any]) -> RunInfo:
    """A run whose provenance records these benchmarks (benchmark, env, options, max_tokens)."""
    return run_info(run_id="r", model="m", provenance=provenance(*(benchmark_provenance(**r) for r in records)))


def test_each_setting_gets_its_lm_eval_rows(
    make_rollout: Any, metrics_of: Any, local_store: Store, tmp_path: Path
) -> None:
    rows = gsm8k_rows(make_rollout, "gsm8k_0shot", [True, False, False, False], [True, True, False, False])
    rows += gsm8k_rows(make_rollout, "gsm8k_8shot", [True, True, True, False], [True, True, True, True])
    rows += [make_rollout(benchmark="tetris", prompt_id="t", info={})]  # declares no lm-eval metric
    specs = {label: ENVS["gsm8k"].metrics for label in ("gsm8k_0shot", "gsm8k_8shot")}
    metrics = RunMetrics.model_validate(metrics_of(rows, specs))
    info = with_benchmarks(
        {
            "benchmark": "gsm8k_0shot",
            "env": "gsm8k",
            "options": {"fewshot": 0, "mode": "completion"},
            "max_tokens": 256,
        },
        {"benchmark": "gsm8k_8shot", "env": "gsm8k", "options": {"fewshot": 8, "mode": "chat"}, "max_tokens": None},
        {"benchmark": "tetris", "env": "tetris", "options": {}},
    )
    table = lm_eval_table(metrics, info)
    assert table is not None
    se = lambda p, n: f"{math.sqrt(p * (1 - p) / (n - 1)):.4f}"  # noqa: E731  lm-eval's mean_stderr
    assert table.rows == [
        ["gsm8k_0shot", "0-shot, mode=completion, max_tokens=256", STRICT, "0.2500", se(0.25, 4), "4"],
        ["gsm8k_0shot", "0-shot, mode=completion, max_tokens=256", FLEXIBLE, "0.5000", se(0.5, 4), "4"],
        ["gsm8k_8shot", "8-shot", STRICT, "0.7500", se(0.75, 4), "4"],
        ["gsm8k_8shot", "8-shot", FLEXIBLE, "1.0000", "0.0000", "4"],
    ]

    # and it opens the markdown report, right under the headline
    urls = write_report(str(tmp_path / "run"), metrics, info, [], local_store)
    report = Path(urls["markdown"]).read_text()
    assert report.index("## Headline") < report.index("## lm-eval metrics") < report.index("## Run")
    assert "| gsm8k_8shot | 8-shot | exact_match,strict-match | 0.7500 |" in report


def test_runs_without_provenance_map_benchmarks_by_name(make_rollout: Any, metrics_of: Any) -> None:
    rows = gsm8k_rows(make_rollout, "gsm8k", [True, False], [True, False])
    metrics = RunMetrics.model_validate(metrics_of(rows, {"gsm8k": ENVS["gsm8k"].metrics}))
    table = lm_eval_table(metrics, run_info())  # no provenance: an older run
    assert table is not None and [r[:4] for r in table.rows] == [
        ["gsm8k", "defaults", STRICT, "0.5000"],
        ["gsm8k", "defaults", FLEXIBLE, "0.5000"],
    ]
    only_tetris = RunMetrics.model_validate(metrics_of([make_rollout(benchmark="tetris", info={})], {}))
    assert lm_eval_table(only_tetris, run_info()) is None
