"""The report's tables for a run with a judge: the Run table does not repeat the judge's record."""

from __future__ import annotations

from core.judge_record import JudgeInfo
from tasks.reporting.tables import run_sections
from tests.tasks.conftest import run_info


def test_the_run_table_leaves_the_judge_to_its_own_sections() -> None:
    info = run_info().model_copy(update={"judge": JudgeInfo(model="qwen3-8b", identity="i", mode="external")})
    [run, *_] = run_sections(info)
    assert run.title == "Run" and "judge" not in [row[0] for row in run.table.rows]
