"""report.html and index.html in headless Chromium, opened from file:// with no network.

No console errors, every chart drawn; the rollout browser (rollouts.html) filters, sorts, searches and shows
transcripts as chats. Screenshots go to test-artifacts/ at the repo root.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.metrics_doc import RunMetrics
from core.store import Store
from tasks.analysis.compare import compare
from tasks.analysis.metrics import compute_metrics
from tasks.reporting.browser import load_rollouts, write_browser
from tasks.reporting.index import index_entry, update_index
from tasks.reporting.report import write_report
from tasks.reporting.view import report_title

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


def tetris_transcript(g: int, r: int) -> list[dict[str, Any]]:
    """A game as envs/tetris.py records it: system and user prompt, then g + r step calls and their boards."""
    turns: list[dict[str, Any]] = [
        {"role": "system", "content": "You play Tetris."},
        {"role": "user", "content": "New game"},
    ]
    for c in range(g + r):
        args = json.dumps({"actions": ["Left", "Down"][: c % 2 + 1]})
        call = {"id": f"call_{c}", "type": "function", "function": {"name": "step", "arguments": args}}
        turns.append({"role": "assistant", "content": None, "tool_calls": [call]})
        board = "\n".join(["_____", "_XX__" if c % 2 else "__XX_", "#_###"])
        result = f"Applied {c % 2 + 1} action(s).\n\nBoard:\n{board}"
        turns.append({"role": "tool", "tool_call_id": f"call_{c}", "content": result})
    return [*turns, {"role": "assistant", "content": "<answer>Left || Down</answer>"}]


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
            transcript=tetris_transcript(g, r),
            info={"final_board": "_____\n#_###", "cleared_rows": int(g == 2)},
        )
        for g in range(3)
        for r in range(2)
    ]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A store with two runs of one deployment; the second compares with the first."""
    from core.schema import to_parquet_bytes
    from tests.tasks.conftest import rollout, run_info

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
        info = run_info(run_id=run_id, deployment="nightly", model="tiny", finished_at=f"2025-01-0{i + 1}T00:00")
        comparison = None
        if previous:
            base_metrics, base_info = previous
            comparison = compare(metrics, base_metrics, info, base_info, f"runs/{base_info.run_id}/report.html")
        urls = write_report(store.path("runs", run_id), metrics, info, files, store, comparison)
        # what report.py's write_report is to do as well (see tasks/reporting/browser.py)
        frame = load_rollouts(files, store, dedupe=False)
        urls["browser"] = write_browser(store.path("runs", run_id), report_title(info), metrics, frame, store)
        update_index(store, index_entry(info, metrics, urls, store.url))
        previous = (metrics, info)
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


def rollouts_page(browser: Any, site: dict[str, Any], hash_: str = "") -> Page:
    return Page(browser, Path(site["run-b"]["urls"]["browser"]).as_uri() + hash_)


def shown(page: Page) -> str:
    return page.page.locator("#f-count").text_content()


def test_browser_opens_a_search_from_the_url(browser: Any, site: dict[str, Any]) -> None:
    """The hash holds the filters: a search over the completions, and the first hit's transcript as turns."""
    page = rollouts_page(browser, site, "#q=STEP%20BY%20step&open=first")
    assert page.page.locator("#f-q").input_value() == "STEP BY step"
    assert shown(page) == "4 of 54 rollouts shown"  # p01's 4 completions; 48 gsm8k + 6 tetris rollouts
    assert page.page.locator("#rows tbody tr").count() == 4
    turns = page.page.locator("#t-turns .turn")
    assert [t.split("\n")[0] for t in turns.all_inner_texts()[:2]] == ["USER", "ASSISTANT"]
    assert turns.nth(0).locator(".msg-text").text_content() == "1+1?"
    assert EVIL in turns.nth(1).locator(".msg-text").text_content()  # model text shown as text, never run
    assert page.page.locator("#t-title").text_content().startswith("gsm8k · prompt p01 · repeat ")
    page.page.screenshot(path=str(ARTIFACTS / "browser-search.png"), full_page=True)
    assert page.errors == []  # no console errors, no alert() dialog, no network
    page.page.close()


def test_browser_filters_sorts_and_searches(browser: Any, site: dict[str, Any]) -> None:
    page = rollouts_page(browser, site)
    p = page.page
    assert shown(page) == "54 of 54 rollouts shown"
    p.locator("#f-q").fill("<b>bold</b>")  # typed text, matched literally
    assert shown(page) == "4 of 54 rollouts shown"
    assert "q=%3Cb%3Ebold%3C%2Fb%3E" in p.url  # the view can be linked
    p.locator("#f-q").fill("")
    p.locator("#f-result").select_option("error")
    assert shown(page) == "1 of 54 rollouts shown"
    assert p.locator("#rows tbody tr td").nth(1).text_content() == "p03"
    successes = site["run-b"]["metrics"].benchmarks["gsm8k"].successes
    p.locator("#f-bench").select_option("gsm8k")
    p.locator("#f-result").select_option("correct")
    assert shown(page) == f"{successes} of 54 rollouts shown"
    p.locator("#f-result").select_option("")
    p.locator("#f-min").fill("0.5")
    assert shown(page) == f"{successes} of 54 rollouts shown"
    p.locator("#f-min").fill("")
    p.locator("#f-bench").select_option("tetris")
    p.locator("#f-sort").select_option("reward")
    p.locator("#f-desc").check()
    rewards = [float(t) for t in p.locator("#rows tbody tr td:nth-child(5)").all_text_contents()]
    assert rewards == sorted(rewards, reverse=True) and len(rewards) == 6 and rewards[0] == 9.8
    p.locator("#f-sort").select_option("turns")
    assert shown(page) == "6 of 54 rollouts shown"
    assert page.errors == []
    page.page.close()


def test_tetris_transcript_shows_calls_results_and_boards(browser: Any, site: dict[str, Any]) -> None:
    page = rollouts_page(browser, site, "#b=tetris&open=tetris/game-1/1")
    turns = page.page.locator("#t-turns .turn")
    roles = [t.split("\n")[0] for t in turns.all_inner_texts()]
    assert roles[:6] == [
        "SYSTEM",
        "USER",
        "ASSISTANT",
        "TOOL · RESULT OF CALL_0",
        "ASSISTANT",
        "TOOL · RESULT OF CALL_1",
    ]
    call = turns.nth(4).locator(".tool-call")
    assert call.locator(".tool-name").first.text_content() == "step("
    assert call.locator(".tool-args").text_content() == '{\n  "actions": [\n    "Left",\n    "Down"\n  ]\n}'
    board = turns.nth(5).locator(".board")
    assert board.locator(".board-row").count() == 3 and board.locator(".cell").count() == 15
    assert board.locator(".cell.falling").count() == 2 and board.locator(".cell.settled").count() == 4
    assert page.page.locator("#t-turns .board").count() == 3  # 2 tool results and the final board
    page.page.locator("#transcript").screenshot(path=str(ARTIFACTS / "browser-tetris.png"))
    assert page.errors == []
    page.page.close()


def test_at_1400_px_the_browser_shows_a_transcript_beside_a_table_that_does_not_scroll(
    browser: Any, site: dict[str, Any]
) -> None:
    """Opened without a hash, the browser shows the first rollout's transcript beside the table (the right half
    was empty until a click; the table scrolled sideways in its half) and leaves the URL alone."""
    page = rollouts_page(browser, site)
    page.page.set_viewport_size({"width": 1400, "height": 900})
    table, transcript = (page.page.locator(sel).bounding_box() for sel in (".browser-split .scroll", "#transcript"))
    assert transcript is not None and table is not None, "the transcript is hidden"
    assert transcript["x"] >= table["x"] + table["width"] and transcript["width"] > 400  # side by side
    assert page.page.evaluate("document.querySelector('.browser-split .scroll').scrollWidth") <= table["width"] + 1
    assert table["width"] + transcript["width"] > 0.9 * 1400 - 48  # the page's width is used
    assert page.page.locator("#t-title").text_content().startswith("gsm8k · prompt p00 · repeat 0")
    assert "open=" not in page.page.url  # the first rollout is shown, not opened into the link
    page.page.screenshot(path=str(ARTIFACTS / "browser-1400.png"))
    assert page.errors == []
    page.page.close()


def test_report_links_to_the_browser(browser: Any, site: dict[str, Any]) -> None:
    page = Page(browser, Path(site["run-b"]["urls"]["html"]).as_uri())
    page.page.locator("#browser-tetris a").click()
    page.page.wait_for_load_state("load")
    assert page.page.url.endswith("/runs/run-b/rollouts.html#b=tetris")
    assert page.page.locator("#f-bench").input_value() == "tetris"
    assert shown(page) == "6 of 54 rollouts shown"
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


def test_a_flipped_prompt_links_into_both_runs_browsers(browser: Any, tmp_path: Path) -> None:
    """The report's flips table: each prompt's link opens this run's and the baseline's rollout browser showing
    that prompt's rollouts alone (the hash's `p`), benchmark chosen."""
    from tests.cli.test_compare_command import add_run, rows

    store = Store(str(tmp_path / "store"))
    add_run(store, "before", 1, rows("before", set(range(30))))
    add_run(store, "after", 2, rows("after", set(range(3, 30))))  # p00..p02 right -> wrong
    page = Page(browser, (tmp_path / "store/runs/after/report.html").as_uri())
    flips = page.page.locator("table.flips tbody tr")
    assert flips.count() == 3 and flips.first.get_attribute("data-prompt") == "p00"
    assert "3 right → wrong, 0 wrong → right of 40 shared prompts" in page.page.locator("ul.flip-summary").inner_text()
    page.page.screenshot(path=str(ARTIFACTS / "report-flips.png"), full_page=True)
    for link, run in (("this run", "after"), ("baseline", "before")):
        page.page.goto((tmp_path / "store/runs/after/report.html").as_uri())
        page.page.locator("table.flips tbody tr").nth(1).locator("a", has_text=link).click()
        page.page.wait_for_load_state("load")
        assert page.page.url.endswith(f"/runs/{run}/rollouts.html#b=gsm8k&p=p01")
        assert page.page.locator("#f-prompt").input_value() == "p01"
        assert page.page.locator("#f-bench").input_value() == "gsm8k"
        assert shown(page) == "2 of 80 rollouts shown"  # p01's two repeats, not p10..p19's
        texts = page.page.locator("#rows tbody tr").all_inner_texts()
        assert len(texts) == 2 and all("p01" in t for t in texts)
    assert page.errors == []
    page.page.close()
