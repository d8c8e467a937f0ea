"""A Tetris run's report puts every statistic of the published Qwen3-4B profile beside this run's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.metrics_doc import RunMetrics
from core.store import Store
from envs.registry import ENVS
from envs.tetris_reference import QWEN3_4B
from tasks.reporting.reference import reference_section, title
from tasks.reporting.report import write_report
from tests.tasks.conftest import benchmark_provenance, provenance, run_info

TITLE = title(QWEN3_4B)

# (prompt, reward, tool calls, success): 2 games x 3 rollouts
GAMES = [
    ("g0", -0.9, 3, False), ("g0", -0.9, 5, False), ("g0", 9.5, 6, True),
    ("g1", -0.9, 10, False), ("g1", -2.0, 10, False), ("g1", -0.3, 0, False),
]  # fmt: skip


def tetris_metrics(make_rollout: Any, metrics_of: Any, label: str = "tetris") -> RunMetrics:
    rows = [
        make_rollout(
            benchmark=label, prompt_id=p, repeat=i, reward=r, tool_calls=c, success=s, parsed_answer=None,
            info={"end_reason": "success" if s else "lockout", "tool_calls": c},
        )
        for i, (p, r, c, s) in enumerate(GAMES)
    ]  # fmt: skip
    return RunMetrics.model_validate(metrics_of(rows, {label: ENVS["tetris"].metrics}))


def test_every_published_statistic_has_a_row(make_rollout: Any, metrics_of: Any) -> None:
    bm = tetris_metrics(make_rollout, metrics_of).benchmarks["tetris"]
    section = reference_section(bm, ENVS["tetris"].reference_profile)
    assert section.title == TITLE and section.table.header == ["statistic", "this run", "reference"]
    rows = {row[0]: row[1:] for row in section.table.rows}
    assert rows["prompts x repeats"] == ["2 x 3", "200 x 16"]
    assert rows["success rate"] == ["16.67% (1/6)", "5.09% (163/3,200)"]
    assert rows["mean reward"] == [f"{sum(g[1] for g in GAMES) / 6:.2f}", "-0.29"]
    assert rows["median reward"] == ["-0.90", "-0.80"]
    assert rows["min, max reward"] == ["-2.00, 9.50", "-2.00, 19.20"]
    assert rows["most common reward"] == ["-0.90 (50.00% of rollouts)", "-0.90 (21.00% of rollouts)"]
    assert rows["tool calls per rollout"] == [f"{34 / 6:.2f}", "7.48"]
    assert rows["tool calls range"] == ["0 to 10", "0 to 10"]
    assert rows["reward std"][1] == "–"  # not published
    assert rows["Pearson r (tool calls, reward)"][1] == f"{QWEN3_4B.figures['tool_calls_reward_corr']:.3f}"
    assert rows["Pearson r (tool calls, reward)"][0] not in ("–", "")


def test_the_report_shows_it_for_tetris_benchmarks_under_any_label(
    make_rollout: Any, metrics_of: Any, local_store: Store, tmp_path: Path
) -> None:
    metrics = tetris_metrics(make_rollout, metrics_of, label="tetris_tools")
    info = run_info(run_id="r", model="m", provenance=provenance(benchmark_provenance("tetris_tools", "tetris")))
    urls = write_report(str(tmp_path / "run"), metrics, info, [], local_store)
    report = Path(urls["markdown"]).read_text()
    section = report[report.index(f"### {TITLE}") :]
    assert report.index("## Benchmark: tetris_tools") < report.index(f"### {TITLE}")
    assert "| success rate | 16.67% (1/6) | 5.09% (163/3,200) |" in section
    assert TITLE in Path(urls["html"]).read_text()
    # a benchmark of another environment has none
    gsm8k = run_info(run_id="r", model="m", provenance=provenance(benchmark_provenance("tetris_tools", "gsm8k")))
    other = write_report(str(tmp_path / "other"), metrics, gsm8k, [], local_store)
    assert TITLE not in Path(other["markdown"]).read_text()
