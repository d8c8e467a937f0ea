"""Run reports: the run's report files, the Prefect artifacts pointing at them, and the terminal summary.

The files are metrics.json, report.md, report.html and the rollout browser rollouts.html (browser.py) in
the run's folder; report.html links the store's plotly.js (assets.py), or holds it when the run's config
asks for single-file reports.
Everything shown comes from the run's record (`core.record.RunRecord`: the metrics, ``run_info`` with the
config redacted, and the baseline comparison when there was a baseline) and the rollout files, so a report
can be rebuilt from a run's store at any time. metrics.json is that record. Files go through the run's
`Store`, so they are written atomically to a local folder or an object store alike.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from core import secrets
from core.record import Comparison, RunInfo, RunRecord
from core.store import Store, join
from tasks.prefect_sync import sync_call
from tasks.reporting.assets import plotly_script, self_contained_by_config
from tasks.reporting.browser import load_rollouts, write_browser
from tasks.reporting.comparison import ComparisonView, comparison_view
from tasks.reporting.format import browser_url, slug
from tasks.reporting.headline import (
    Metrics,
    as_run_metrics,
    benchmark_metrics_section,
    headline_records,
    headline_table,
)
from tasks.reporting.index import index_entry, update_index
from tasks.reporting.judge import judge_sections
from tasks.reporting.parts import Link, Section, Table, text_lines
from tasks.reporting.render import render_html, render_markdown
from tasks.reporting.view import lm_eval_section, report_title, report_view

logger = logging.getLogger(__name__)

REPORT_FILES = {"metrics": "metrics.json", "markdown": "report.md", "html": "report.html"}
DEFAULT_ARTIFACT_KEY = "eval-report"
COMPARISON_ARTIFACT_KEY = "eval-comparison"


def run_record(metrics: Metrics, run_info: RunInfo, comparison: Comparison | None = None) -> RunRecord:
    """The record metrics.json holds: the metrics, the run's info with its config redacted, the comparison."""
    run = as_run_metrics(metrics)
    info = run_info.model_copy(update={"config": secrets.redact(run_info.config)})
    return RunRecord(**dict(run), run_info=info, comparison=comparison)


def write_report(
    run_dir: str,
    metrics: Metrics,
    run_info: RunInfo,
    files: list[str],
    store: Store,
    comparison: Comparison | None = None,
    self_contained: bool | None = None,
) -> dict[str, str]:
    """Write metrics.json, report.md, report.html and the rollout browser (rollouts.html) into run_dir
    (atomically) and return their URLs.

    report.html inlines plotly.js when `self_contained` (None: as the run's config says,
    `store.self_contained_reports`); otherwise it links the store's copy."""
    record = run_record(metrics, run_info, comparison)
    run, run_info = as_run_metrics(metrics), record.run_info
    # computed from the same files as the metrics: no duplicates there means no dedupe window here
    rollouts = load_rollouts(files, store, dedupe=run.duplicate_rollouts != 0)
    view = report_view(run, run_info, comparison, rollouts)
    urls = {kind: join(run_dir, name) for kind, name in REPORT_FILES.items()}
    payload = record.model_dump(mode="json", exclude={"comparison"} if comparison is None else None)
    store.write_text(urls["metrics"], json.dumps(payload, indent=2) + "\n")
    store.write_text(urls["markdown"], render_markdown("report.md.j2", view=view))
    urls["browser"] = write_browser(run_dir, view.title, run, rollouts, store)  # before the report that links it
    if self_contained is None:
        self_contained = self_contained_by_config(run_info)
    plotly = plotly_script(store, urls["html"], self_contained) if view.has_charts else None
    store.write_text(urls["html"], render_html("report.html.j2", view=view, plotly=plotly))
    return urls


def artifact_key(text: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return slug(text) or DEFAULT_ARTIFACT_KEY


@dataclass(frozen=True)
class ArtifactView:
    """The `eval-report` artifact: the headline and where the full report and the run index are."""

    title: str
    comparison: ComparisonView | None
    headline: Table
    benchmark_metrics: Section | None
    lm_eval: Section | None
    judge: list[Section]  # the judge's verdicts and calibration, and the pairwise comparison
    links: list[Link]
    metrics_url: str
    markdown_url: str


def artifact_markdown(
    urls: dict[str, str], metrics: Metrics, run_info: RunInfo, comparison: Comparison | None = None
) -> str:
    links = [Link("Full report", urls["html"], browser_url(urls["html"]))]
    if urls.get("index_html"):
        links.append(Link("All runs", urls["index_html"], browser_url(urls["index_html"])))
    view = ArtifactView(
        title=report_title(run_info),
        comparison=comparison_view(comparison) if comparison else None,
        headline=headline_table(metrics),
        benchmark_metrics=benchmark_metrics_section(metrics),
        lm_eval=lm_eval_section(as_run_metrics(metrics), run_info),
        judge=judge_sections(run_info.judge),
        links=links,
        metrics_url=urls["metrics"],
        markdown_url=urls["markdown"],
    )
    return render_markdown("artifact.md.j2", view=view)


def comparison_markdown(comparison: Comparison) -> str:
    """The comparison as a markdown section (the `eval-comparison` artifact; also atop report.md)."""
    return render_markdown("comparison.md.j2", view=comparison_view(comparison))


def _json_safe(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def publish_artifacts(
    urls: dict[str, str],
    metrics: Metrics,
    run_info: RunInfo,
    key: str = DEFAULT_ARTIFACT_KEY,
    comparison: Comparison | None = None,
) -> None:
    """Attach the report to the current Prefect run: the headline (markdown and table), links to the
    HTML report and the run index, and the baseline comparison (key `eval-comparison`) if any."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
    from prefect.context import get_run_context
    from prefect.exceptions import MissingContextError

    try:
        get_run_context()
    except MissingContextError:
        logger.debug("not inside a Prefect run; skipping report artifacts")
        return
    run = as_run_metrics(metrics)
    key = artifact_key(key)
    description = f"evalflow run {run_info.run_id}: {run_info.model}"
    # sync_call: these dispatch to coroutines inside async flows, which would never be awaited here.
    sync_call(
        create_markdown_artifact,
        markdown=artifact_markdown(urls, run, run_info, comparison),
        key=key,
        description=description,
    )
    records = [{k: _json_safe(v) for k, v in r.items()} for r in headline_records(run)]
    if records:
        sync_call(create_table_artifact, table=records, key=f"{key}-metrics", description=description)
    sync_call(
        create_link_artifact,
        link=browser_url(urls["html"]),
        link_text="HTML report",
        key=f"{key}-html",
        description=description,
    )
    if urls.get("index_html"):
        sync_call(
            create_link_artifact,
            link=browser_url(urls["index_html"]),
            link_text="All runs (index)",
            key=f"{key}-index",
            description=description,
        )
    if comparison:
        comparison_key = COMPARISON_ARTIFACT_KEY if key == DEFAULT_ARTIFACT_KEY else f"{key}-comparison"
        sync_call(
            create_markdown_artifact,
            markdown=comparison_markdown(comparison),
            key=comparison_key,
            description=description,
        )


# what the eval flow's last log line says before its stage timings and this summary (flows/eval.py): a
# follower that has shown that line (ops/local.py) does not print the table again
FINISHED_MARK = " finished; stages: "


def format_terminal_summary(metrics: Metrics, urls: dict[str, str]) -> str:
    """A plain-text headline table and the report locations, for the end of a CLI run."""
    run = as_run_metrics(metrics)
    lines = text_lines(headline_table(run))
    if (section := benchmark_metrics_section(run)) is not None:
        lines += ["", *text_lines(section.table)]
    if not run.benchmarks:
        lines.append("(no rollouts)")
    lines.append(f"total rollouts: {run.total_rollouts:,}")
    lines += [f"{kind}: {url}" for kind, url in urls.items()]
    return "\n".join(lines)


@task(name="write-report", cache_policy=NO_CACHE)
def report_task(
    run_dir: str,
    metrics: Metrics,
    run_info: RunInfo,
    files: list[str],
    store: Store,
    comparison: Comparison | None = None,
    index: bool = True,
) -> dict[str, str]:
    """Write the reports, add the run to the index at the store's root (unless `index` is false) and
    attach everything to the flow run as artifacts. Returns the URLs (index_json/index_html included)."""
    urls = write_report(run_dir, metrics, run_info, files, store, comparison)
    if index:
        urls.update(update_index(store, index_entry(run_info, metrics, urls, store.url, comparison)))
    publish_artifacts(urls, metrics, run_info, comparison=comparison)
    get_run_logger().info("report written: %s", urls["html"])
    return urls
