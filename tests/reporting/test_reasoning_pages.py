"""A reasoning model's run as a person sees it, in headless Chromium: the report's Reasoning section and charts,
the rollout browser's folded reasoning and its "truncated while reasoning" filter, the training curve's reasoning
panels. No console error on any page; screenshots go to test-artifacts/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.schema import to_parquet_bytes
from core.store import Store
from tasks.analysis.metrics import compute_metrics
from tasks.reporting.browser import load_rollouts, write_browser
from tasks.reporting.index import index_entry, update_index
from tasks.reporting.report import write_report
from tasks.reporting.training_curve import write_curve_report
from tasks.reporting.view import report_title
from tests.tasks.conftest import rollout, run_info
from tests.tasks.test_browser import ARTIFACTS, CHROMIUM, LAUNCH_ARGS, Page, playwright

TRAINING = "grpo-think-0a1b2c3d"
STEPS = (100, 200, 300)


def thinking_rows(run_id: str, step: int) -> list[dict[str, Any]]:
    """20 prompts x 4: reasoning grows with the step; the longest quarter of later steps is cut off."""
    rows = []
    for p in range(20):
        for r in range(4):
            tokens = 40 + step // 2 + 13 * p + r
            cut = tokens > 330
            ok = not cut and (p + r) % 3 != 0
            rows.append(rollout(
                run_id=run_id, prompt_id=f"p{p:02d}", repeat=r, success=ok, reward=float(ok),
                reasoning=f"Let me think about p{p}. " * 5, reasoning_tokens=tokens, answer_tokens=0 if cut else 12,
                completion_tokens=tokens + (0 if cut else 12), ended_in_reasoning=cut,
                completion="" if cut else f"#### {2 if ok else 3}", parsed_answer=None if cut else str(2 if ok else 3),
                finish_reason="length" if cut else "stop",
                transcript=[{"role": "user", "content": f"q{p}"},
                            {"role": "assistant", "content": "" if cut else "#### 2", "reasoning": f"thinking {p}"}],
            ))  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    store = Store(str(tmp_path_factory.mktemp("reasoning") / "store"))
    out: dict[str, Any] = {"store": store}
    for i, step in enumerate(STEPS):
        run_id = f"think-{step}"
        url = store.path("runs", run_id, "rollouts", "gsm8k", "batch-0.parquet")
        files = [store.write_bytes(url, to_parquet_bytes(thinking_rows(run_id, step)))]
        metrics = compute_metrics(files, store)
        info = run_info(run_id=run_id, training_run=TRAINING, step=step, finished_at=f"2025-01-0{i + 1}T00:00")
        urls = write_report(store.path("runs", run_id), metrics, info, files, store)
        frame = load_rollouts(files, store, dedupe=False)
        urls["browser"] = write_browser(store.path("runs", run_id), report_title(info), metrics, frame, store)
        update_index(store, index_entry(info, metrics, urls, store.url))
        out[step] = {"urls": urls, "metrics": metrics}
    write_curve_report(store, TRAINING)
    out["curve"] = Path(store.path("training", TRAINING, "index.html"))
    return out


@pytest.fixture(scope="module")
def browser() -> Any:
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        yield chromium
        chromium.close()


def test_the_report_shows_the_reasoning_section_and_charts(browser: Any, site: dict[str, Any]) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    stats = site[300]["metrics"].benchmarks["gsm8k"].reasoning
    assert stats is not None and stats.ended_in_reasoning > 0 and len(stats.by_length) == 4
    page = Page(browser, Path(site[300]["urls"]["html"]).as_uri())
    divs, plots, with_svg = page.charts_rendered()
    assert divs == plots == with_svg
    for chart in ("chart-gsm8k-reasoning-tokens", "chart-gsm8k-accuracy-by-reasoning"):
        assert page.page.locator(f"#{chart} svg.main-svg").count() >= 1, chart
    text = page.page.locator("body").inner_text()
    assert "truncated while reasoning" in text and "Accuracy by reasoning length" in text
    page.page.locator("#chart-gsm8k-accuracy-by-reasoning").screenshot(path=str(ARTIFACTS / "report-reasoning.png"))
    assert page.errors == []
    page.page.close()


def test_the_browser_folds_the_reasoning_and_filters_truncated(browser: Any, site: dict[str, Any]) -> None:
    page = Page(browser, Path(site[300]["urls"]["browser"]).as_uri() + "#o=truncated")
    truncated = site[300]["metrics"].benchmarks["gsm8k"].reasoning.ended_in_reasoning
    assert page.page.locator("#f-count").text_content() == f"{truncated} of 80 rollouts shown"
    page.page.locator("#rows tbody tr").first.click()
    assistant = page.page.locator("#t-turns .turn.role-assistant")
    folded = assistant.locator("details.reasoning")
    assert folded.count() == 1 and not folded.evaluate("d => d.open")
    assert folded.locator("summary").text_content().startswith("reasoning (")
    page.page.locator("#transcript").screenshot(path=str(ARTIFACTS / "browser-reasoning.png"))
    assert page.errors == []
    page.page.close()


def test_the_training_curve_charts_reasoning_tokens_and_truncation(browser: Any, site: dict[str, Any]) -> None:
    page = Page(browser, site["curve"].as_uri())
    divs, plots, with_svg = page.charts_rendered()
    assert divs == plots == with_svg == 4  # rates, reward, tokens (with reasoning and answer), truncation
    truncated = page.page.locator("[id$='-gsm8k-truncated']")
    assert truncated.count() == 1
    names = page.page.locator("[id$='-gsm8k-tokens'] .legendtext").all_text_contents()
    assert {"reasoning tokens", "answer tokens"} <= set(names)
    assert "truncated while reasoning" in page.page.locator("body").inner_text()
    page.page.screenshot(path=str(ARTIFACTS / "curve-reasoning.png"), full_page=True)
    assert page.errors == []
    page.page.close()
