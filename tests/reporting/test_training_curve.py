"""A training run's curve: each step's newest complete run, values equal to the step reports', the best step,
significant changes, relative links that resolve, the page in headless Chromium, and the index's link to it.

The store is built the way runs build it: rollout parquet files, the real analysis, write_report and
update_index, one run per checkpoint.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from core.judge_record import JudgeInfo, Pairwise
from core.schema import to_parquet_bytes
from core.store import Store
from tasks.analysis.metrics import compute_metrics
from tasks.reporting.index import index_entry, update_index
from tasks.reporting.index_page import best_step
from tasks.reporting.report import write_report
from tasks.reporting.training_curve import best_steps, curve_points, significant_changes, write_curve_report
from tests.tasks.conftest import rollout, run_info

TRAINING = "grpo-qwen3-1a2b3c4d"
OTHER = "grpo-other-5e6f7a8b"
# (run id, training run, step, state, gsm8k successes per 10, finished): step 200 also has a newer failed run
# (left out), step 300 an older evaluation (superseded); another training run and a plain run share the store
RUNS = [
    ("t-s100", TRAINING, 100, "complete", 6, "2025-01-01T01:00:00+00:00"),
    ("t-s200", TRAINING, 200, "complete", 2, "2025-01-02T01:00:00+00:00"),
    ("t-s200-failed", TRAINING, 200, "failed", 9, "2025-01-03T01:00:00+00:00"),
    ("t-s300-old", TRAINING, 300, "complete", 9, "2025-01-03T02:00:00+00:00"),
    ("t-s300", TRAINING, 300, "complete", 5, "2025-01-04T01:00:00+00:00"),
    ("o-s100", OTHER, 100, "complete", 10, "2025-01-05T01:00:00+00:00"),
    ("plain", None, None, "complete", 4, "2025-01-06T01:00:00+00:00"),
]
PROMPTS, REPEATS = 40, 4
JUDGED = {"t-s200": 0.41, "t-s300": 0.62}  # the judge's win rate of a step against its baseline


def rows(run_id: str, step: int, tenths: int) -> dict[str, list[dict[str, Any]]]:
    """gsm8k: 40 prompts x 4 repeats, `tenths`/10 of them right, completions longer each step; math: 8 x 2
    with graded rewards."""
    gsm = [
        rollout(run_id=run_id, prompt_id=f"p{p:02d}", repeat=r, success=(ok := (p + r) % 10 < tenths),
                reward=float(ok), parsed_answer="2" if ok else "3", completion_tokens=20 + step // 10 + p % 7)
        for p in range(PROMPTS)
        for r in range(REPEATS)
    ]  # fmt: skip
    graded = {(p, r): 0.25 * ((p + r + tenths) % 5) for p in range(8) for r in range(2)}
    math = [
        rollout(run_id=run_id, benchmark="math", prompt_id=f"m{p}", repeat=r, success=v >= 0.5, reward=v,
                completion_tokens=50 + p)
        for (p, r), v in graded.items()
    ]  # fmt: skip
    return {"gsm8k": gsm, "math": math}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """Every run of RUNS reported and indexed, then both training runs' curves written."""
    store = Store(str(tmp_path_factory.mktemp("curve") / "store"))
    for run_id, training, step, state, tenths, finished in RUNS:
        files = [
            store.write_bytes(store.path("runs", run_id, "rollouts", name, "batch-0.parquet"), to_parquet_bytes(batch))
            for name, batch in rows(run_id, step or 0, tenths).items()
        ]
        metrics = compute_metrics(files, store)
        info = run_info(run_id=run_id, training_run=training, step=step, status=state, finished_at=finished)
        if run_id in JUDGED:  # the judge's pairwise verdicts against the step before
            pairwise = Pairwise(benchmark="gsm8k", baseline_run_id="t-s100", pairs=160, wins=40, ties=50, losses=70,
                                flips=30, win_rate=JUDGED[run_id], ci_low=JUDGED[run_id] - 0.08,
                                ci_high=JUDGED[run_id] + 0.08)  # fmt: skip
            judge = JudgeInfo(model="judge", identity="i", mode="external", pairwise=[pairwise])
            info = info.model_copy(update={"judge": judge})
        urls = write_report(store.path("runs", run_id), metrics, info, files, store)
        update_index(store, index_entry(info, metrics, urls, store.url))
    write_curve_report(store, TRAINING)
    write_curve_report(store, OTHER)
    return store


def metrics_json(store: Store, run_id: str) -> dict[str, Any]:
    return json.loads(store.read_text(store.path("runs", run_id, "metrics.json")))


def local(store: Store, *parts: str) -> Path:
    return Path(store.local_path, *parts)


def test_points_are_each_steps_newest_complete_run_with_its_reports_values(store: Store) -> None:
    points = curve_points(store, TRAINING)
    assert [(p.step, p.run_id) for p in points] == [(100, "t-s100"), (200, "t-s200"), (300, "t-s300")]
    for p in points:
        doc = metrics_json(store, p.run_id)
        assert p.report == f"runs/{p.run_id}/report.html" and p.finished_at == doc["run_info"]["finished_at"]
        for name, bm in p.benchmarks.items():
            want = doc["benchmarks"][name]
            got = bm.model_dump(mode="json")
            assert got["accuracy"] == want["accuracy"] and got["ci"]["accuracy"] == want["ci"]["accuracy"]
            assert got["pass_at_k"]["1"] == want["pass_at_k"]["1"] and got["mean_reward"] == want["mean_reward"]
            assert got["ci"]["mean_reward"] == want["ci"]["mean_reward"] and got["tokens"] == want["tokens"]
    assert [p.benchmarks["gsm8k"].accuracy for p in points] == pytest.approx([0.6, 0.2, 0.5])
    assert [(p.step, p.run_id) for p in curve_points(store, OTHER)] == [(100, "o-s100")]
    assert curve_points(store, "never-trained") == []


def test_best_step_and_the_significant_changes(store: Store) -> None:
    points = curve_points(store, TRAINING)
    assert best_steps(points, "accuracy")["gsm8k"] == 100  # the superseded 90% of step 300 is not a point
    assert best_steps(points, "mean_reward") == {"gsm8k": 100, "math": 200}  # math: 0.547, 0.562, 0.453
    assert best_step([(1, 0.5), (2, 0.5), (3, None)]) == 1 and best_step([(1, None)]) is None  # ties: the earliest
    changes = {(c.benchmark, c.from_step, c.to_step, c.metric): c.row for c in significant_changes(points)}
    drop = changes[("gsm8k", 100, 200, "accuracy")]
    assert drop.regression and drop.delta == pytest.approx(-0.4) and drop.high is not None and drop.high < 0
    assert drop.method == "paired-clustered"  # the steps ask the same prompts
    rise = changes[("gsm8k", 200, 300, "accuracy")]
    assert rise.improvement and rise.low is not None and rise.low > 0
    assert all(r.regression or r.improvement for r in changes.values())


def test_curve_json_holds_the_step_reports_values(store: Store) -> None:
    doc = json.loads(local(store, "training", TRAINING, "curve.json").read_text())
    assert doc["training_run"] == TRAINING and doc["metric"] == "accuracy"
    assert [(p["step"], p["run_id"]) for p in doc["points"]] == [(100, "t-s100"), (200, "t-s200"), (300, "t-s300")]
    for point in doc["points"]:
        want = metrics_json(store, point["run_id"])["benchmarks"]
        for name, got in point["benchmarks"].items():
            for key in ("accuracy", "pass_at_k", "mean_reward", "tokens", "n_prompts"):
                assert got[key] == want[name][key]
            assert got["ci"]["accuracy"] == want[name]["ci"]["accuracy"]
            assert got["ci"]["mean_reward"] == want[name]["ci"]["mean_reward"]
    assert doc["best"]["gsm8k"] == {"step": 100, "run_id": "t-s100", "value": pytest.approx(0.6)}
    drop = next(c for c in doc["changes"] if (c["benchmark"], c["to_step"], c["metric"]) == ("gsm8k", 200, "accuracy"))
    assert drop["from_step"] == 100 and drop["regression"] and drop["high"] < 0


def test_markdown_has_the_steps_best_step_and_changes_tables(store: Store) -> None:
    md = local(store, "training", TRAINING, "curve.md").read_text()
    assert md.startswith(f"# Training run {TRAINING}\n")
    assert "Best step by accuracy: **step 100: 60.00%**" in md
    header = "| step | run | accuracy | 95% CI (clustered) | pass@1 | pass@2 | pass@4 | mean reward | 95% CI |"
    assert header in md
    step_rows = re.findall(r"^\| (\d+) \| (\S+) \| ([\d.]+%) \|.*\| (★)? \| \[report\]\(([^)]+)\) \|$", md, re.M)
    gsm = step_rows[:3]
    assert [(s, run, acc, best) for s, run, acc, best, _ in gsm] == [
        ("100", "t-s100", "60.00%", "★"), ("200", "t-s200", "20.00%", ""), ("300", "t-s300", "50.00%", "")
    ]  # fmt: skip
    assert {href for *_, href in step_rows} == {f"../../runs/{r}/report.html" for r in ("t-s100", "t-s200", "t-s300")}
    assert "| gsm8k | 100 → 200 | accuracy | 60.00% | 20.00% | -40.00 pp |" in md
    assert re.search(
        r"\| gsm8k \| 200 → 300 \| accuracy \| 20\.00% \| 50\.00% \| \+30\.00 pp \| .* \| improvement ▲ \|", md
    )


def hrefs(page: Path) -> list[str]:
    return re.findall(r'(?:href|src)="([^"]+)"', page.read_text())


def test_the_pages_links_resolve_to_files_in_the_store(store: Store) -> None:
    page = local(store, "training", TRAINING, "index.html")
    links = hrefs(page)
    assert all("://" not in link for link in links)  # relative: a folder, `reports serve` and S3 alike
    assert {f"../../runs/{r}/report.html" for r in ("t-s100", "t-s200", "t-s300")} <= set(links)
    assert any(link.startswith("../../static/plotly-") for link in links)
    for link in links:
        assert (page.parent / link).resolve().is_file(), link
    html = page.read_text()
    assert html.count('class="plotly-graph-div"') == 7  # per benchmark: rates, reward, tokens; gsm8k's judge
    assert re.findall(r'<tr data-step="(\d+)" class="best-step">', html) == ["100", "100"]  # gsm8k's, math's
    assert "t-s200-failed" not in html and "t-s300-old" not in html and "o-s100" not in html
    assert "1 not complete" in html and "1 superseded" in html


def test_the_index_lists_the_training_runs_and_links_their_pages(store: Store) -> None:
    page = local(store, "index.html")
    html = page.read_text()
    rows = re.findall(r'<tr data-training-run="([^"]+)"><td><a href="([^"]+)">', html)
    assert rows == [(OTHER, f"training/{OTHER}/index.html"), (TRAINING, f"training/{TRAINING}/index.html")]
    assert all((page.parent / href).is_file() for _, href in rows)
    row = html[html.index(f'data-training-run="{TRAINING}"') :].split("</tr>")[0]
    assert "<td>3</td><td>300</td><td>100 (gsm8k accuracy 60.00%)</td>" in row
    assert re.findall(r'<tr data-run="([^"]+)"', html)[0] == "plain"  # the runs table as before


def test_an_empty_training_run_gets_a_page_saying_so(store: Store, tmp_path: Path) -> None:
    empty = Store(str(tmp_path / "empty"))
    urls = write_curve_report(empty, "nothing-yet")
    html = Path(urls["html"]).read_text()
    assert "No step of this training run has a complete evaluation yet" in html and "plotly" not in html
    assert "href=" not in html  # no index to link back to in an empty store
    assert json.loads(Path(urls["json"]).read_text())["points"] == []
    assert "No step" in Path(urls["markdown"]).read_text()
    with pytest.raises(ValueError, match="training run id"):
        write_curve_report(store, "../escape")


def test_the_page_renders_in_chromium_without_errors(store: Store) -> None:
    from tests.tasks.test_browser import CHROMIUM, LAUNCH_ARGS, Page, playwright

    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        page = Page(browser, local(store, "training", TRAINING, "index.html").as_uri())
        divs, plots, with_svg = page.charts_rendered()
        assert divs == plots == with_svg == 7  # three per benchmark and gsm8k's judge
        assert page.errors == []
        browser.close()


def test_a_steps_pairwise_judge_verdicts_are_on_the_curve(store: Store) -> None:
    points = curve_points(store, TRAINING)
    assert {p.step: p.pairwise["gsm8k"].win_rate for p in points if p.pairwise} == {200: 0.41, 300: 0.62}
    page = local(store, "training", TRAINING, "index.html").read_text()
    assert "gsm8k: the judge's win rate against the baseline (95% CI) by step" in page
    assert "math: the judge's win rate" not in page  # no step judged math pairwise: no chart
