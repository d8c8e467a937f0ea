"""report.html and index.html in headless Chromium, opened from file:// with no network.

No console errors, every chart drawn, the rollout browser's filters and transcripts work. Screenshots go
to test-artifacts/ at the repo root.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.schema import RunMetrics
from core.store import Store
from tasks.analysis.compare import compare
from tasks.analysis.metrics import compute_metrics
from tasks.reporting.index import index_entry, update_index
from tasks.reporting.report import write_report

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(f"headless browser tests need Debian's chromium at {CHROMIUM}", allow_module_level=True)
playwright = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
EVIL = "<script>alert('x')</script> & <b>bold</b>"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync"]  # fmt: skip


def analyze(files: list[str], store: Store) -> RunMetrics:
    """The one call into the analysis from these tests."""
    return compute_metrics(files, store)


def gsm_rows(make_rollout: Callable[..., dict], run_id: str, ok_mod: int) -> list[dict[str, Any]]:
    """12 prompts x 4 repeats; prompt p03 repeat 2 is an error; p01's completions carry EVIL."""
    rows = []
    for p in range(12):
        for r in range(4):
            ok = (p + r) % ok_mod == 0
            rows.append(
                make_rollout(
                    run_id=run_id,
                    prompt_id=f"p{p:02d}",
                    repeat=r,
                    success=ok,
                    reward=float(ok),
                    parsed_answer="2" if ok else "3",
                    completion=f"step by step… {EVIL}" if p == 1 else f"#### {2 if ok else 3}",
                    error="ReadTimeout: took too long" if (p, r) == (3, 2) else None,
                    latency_s=0.2 * (p + 1),
                    completion_tokens=10 * (p + r + 1),
                    info={"strict_correct": ok, "flexible_correct": ok},
                )
            )
    return rows


def tetris_rows(make_rollout: Callable[..., dict], run_id: str) -> list[dict[str, Any]]:
    return [
        make_rollout(
            run_id=run_id,
            benchmark="tetris",
            prompt_id=f"game-{g}",
            repeat=r,
            tool_calls=g + r,
            reward=round(-0.1 * (g + r) + (10.0 if g == 2 else 0.0), 1),
            success=g == 2,
            parsed_answer="Left || Down",
            reference=None,
            transcript=[
                {"role": "user", "content": "board"},
                {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "step"}}]},
                {"role": "tool", "content": "_#_"},
            ],
        )
        for g in range(3)
        for r in range(2)
    ]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A store with two runs of one deployment; the second compares with the first."""
    from core.schema import to_parquet_bytes
    from tests.tasks.conftest import rollout

    root = tmp_path_factory.mktemp("site")
    store = Store(str(root / "store"))
    previous = None
    out: dict[str, Any] = {}
    for i, (run_id, ok_mod) in enumerate((("run-a", 2), ("run-b", 3))):
        files = []
        for name, rows in (("gsm8k", gsm_rows(rollout, run_id, ok_mod)), ("tetris", tetris_rows(rollout, run_id))):
            url = store.path("runs", run_id, "rollouts", name, "batch-0.parquet")
            files.append(store.write_bytes(url, to_parquet_bytes(rows)))
        metrics = analyze(files, store)
        info = {"run_id": run_id, "deployment": "nightly", "model": "tiny", "finished_at": f"2025-01-0{i + 1}T00:00"}
        baseline_info = {"run_id": "run-a", "report": "runs/run-a/report.html"}
        comparison = compare(metrics, previous, info, baseline_info) if previous else None
        urls = write_report(store.path("runs", run_id), metrics, info, files, store, comparison)
        update_index(store, index_entry(info, metrics, urls, store.url))
        previous = metrics
        out[run_id] = {"urls": urls, "metrics": metrics}
    out["index"] = root / "store" / "index.html"
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    ARTIFACTS.mkdir(exist_ok=True)
    with playwright.sync_playwright() as p:
        instance = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        yield instance
        instance.close()


class Page:
    """A page that records console errors, page errors, dialogs and any non-file request."""

    def __init__(self, browser: Any, url: str) -> None:
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.errors.append(f"dialog: {d.message}"), d.dismiss()))
        self.page.on(
            "request", lambda r: None if r.url.startswith(("file:", "data:", "blob:")) else self.errors.append(r.url)
        )
        self.page.goto(url)
        self.page.wait_for_load_state("load")

    def charts_rendered(self) -> tuple[int, int, int]:
        divs = self.page.locator(".plotly-graph-div").count()
        plots = self.page.locator(".js-plotly-plot").count()
        with_svg = self.page.locator(".js-plotly-plot").evaluate_all(
            "els => els.filter(e => e.querySelector('svg.main-svg')).length"
        )
        return divs, plots, with_svg


def visible_rows(box: Any) -> int:
    return box.locator("tbody tr:not([hidden])").count()


def test_report_renders_without_errors(browser: Any, site: dict[str, Any]) -> None:
    page = Page(browser, Path(site["run-b"]["urls"]["html"]).as_uri())
    divs, plots, with_svg = page.charts_rendered()
    assert divs == 2 + 5 + 6  # headline (2), gsm8k (no tool calls: 5), tetris (6)
    assert plots == divs and with_svg == divs
    assert page.page.locator("#comparison").is_visible()
    page.page.screenshot(path=str(ARTIFACTS / "report-top.png"))
    page.page.screenshot(path=str(ARTIFACTS / "report-full.png"), full_page=True)
    assert page.errors == []
    page.page.close()


def test_rollout_filters_and_transcripts(browser: Any, site: dict[str, Any]) -> None:
    page = Page(browser, Path(site["run-b"]["urls"]["html"]).as_uri())
    box = page.page.locator("#browser-gsm8k")
    count = box.locator(".f-count")
    assert visible_rows(box) == 48 and count.text_content() == "48 of 48 rollouts shown"

    box.locator(".f-prompt").fill("P01")  # case-insensitive substring of the prompt id
    assert visible_rows(box) == 4 and count.text_content() == "4 of 48 rollouts shown"
    box.locator(".f-prompt").fill("p1")  # p10, p11
    assert visible_rows(box) == 8
    box.locator(".f-prompt").fill("")

    successes = site["run-b"]["metrics"].benchmarks["gsm8k"].successes
    box.locator(".f-result").select_option("error")
    assert visible_rows(box) == 1
    box.locator(".f-result").select_option("success")
    assert visible_rows(box) == successes
    box.locator(".f-result").select_option("failure")
    assert visible_rows(box) == 48 - successes - 1
    box.locator(".f-result").select_option("")
    box.locator(".f-min").fill("0.5")
    assert visible_rows(box) == successes
    box.locator(".f-min").fill("")
    box.locator(".f-max").fill("0.5")
    assert visible_rows(box) == 48 - successes
    box.locator(".f-max").fill("")

    box.locator(".f-prompt").fill("p01")
    box.locator("tbody tr:not([hidden])").first.click()
    panel = box.locator(".transcript")
    assert panel.is_visible()
    assert box.locator(".t-title").text_content().startswith("prompt p01 · repeat 0")
    assert EVIL in box.locator(".t-text").text_content()  # shown as text, never run as HTML
    transcript = box.locator(".t-json").text_content()
    assert '"messages"' in transcript and '"strict_correct"' in transcript
    panel.screenshot(path=str(ARTIFACTS / "report-transcript.png"))
    box.locator(".t-close").click()
    assert not panel.is_visible()

    tetris = page.page.locator("#browser-tetris")
    tetris.locator("tbody tr").nth(3).click()
    assert '"tool_calls"' in tetris.locator(".t-json").text_content()
    tetris.screenshot(path=str(ARTIFACTS / "report-browser-tetris.png"))
    assert page.errors == []
    page.page.close()


def test_index_renders_and_links_to_reports(browser: Any, site: dict[str, Any]) -> None:
    page = Page(browser, site["index"].as_uri())
    divs, plots, with_svg = page.charts_rendered()
    assert divs == 2 and plots == 2 and with_svg == 2  # nightly x (gsm8k, tetris)
    rows = page.page.locator("#runs tbody tr")
    assert rows.count() == 4  # 2 runs x 2 benchmarks
    assert rows.first.get_attribute("data-run") == "run-b"
    page.page.locator("#run-filter").fill("tetris")
    assert page.page.locator("#runs tbody tr:not([hidden])").count() == 2
    page.page.screenshot(path=str(ARTIFACTS / "index.png"), full_page=True)
    page.page.locator("#run-filter").fill("")
    page.page.locator("#runs tbody tr").first.locator("a", has_text="report").click()
    page.page.wait_for_load_state("load")
    assert page.page.url.endswith("/runs/run-b/report.html")
    assert "run-b" in page.page.title()
    page.page.locator("a", has_text="baseline report").click()
    page.page.wait_for_load_state("load")
    assert page.page.url.endswith("/runs/run-a/report.html")
    assert page.errors == []
    page.page.close()


def test_report_works_after_the_store_moves(browser: Any, site: dict[str, Any], tmp_path: Path) -> None:
    """Relative links only: a copied store (e.g. synced down from S3) browses the same."""
    moved = tmp_path / "moved"
    shutil.copytree(site["index"].parent, moved)
    page = Page(browser, (moved / "index.html").as_uri())
    page.page.locator("#runs tbody tr").last.locator("a", has_text="report").click()
    page.page.wait_for_load_state("load")
    assert page.page.url == (moved / "runs/run-a/report.html").as_uri()
    assert page.errors == []
    page.page.close()
