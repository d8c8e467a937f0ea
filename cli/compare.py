"""`evalflow compare RUN [BASELINE]`: print two runs' comparison and exit 1 when the gate fails (for CI jobs and
nightly checks)."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from cli.common import parse_options
from core.config import StoreConfig

DEFAULT_STORE = StoreConfig().url
GATE_FAILED = 1


def compare(
    run_id: Annotated[str, typer.Argument(help="the run to judge (its id in the store's run index)")],
    baseline_id: Annotated[
        str | None,
        typer.Argument(
            help="the run to compare with; default: the run's own baseline (latest earlier complete run "
            "of its deployment or run name)",
            show_default=False,
        ),
    ] = None,
    store: Annotated[
        str, typer.Option("--store", help="the run store: a folder, file://... or s3://bucket/prefix")
    ] = DEFAULT_STORE,
    max_drop: Annotated[
        float | None,
        typer.Option(
            "--max-drop",
            help="the drop allowed, in the metric's units (rates: 0.02 is 2 points); "
            "default: the run's config (gate.max_drop), else 0",
            show_default=False,
        ),
    ] = None,
    rule: Annotated[
        Literal["ci", "absolute"] | None,
        typer.Option(
            "--rule",
            help="ci: fail when the delta's 95% CI lies wholly beyond -max-drop; absolute: when "
            "the delta does; default: the run's config, else ci",
            show_default=False,
        ),
    ] = None,
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            help="gate only this comparison key (accuracy, pass@1, pass@n, maj@n, mean_reward, "
            "an environment rate's key), repeatable; default: every row",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the comparison document (JSON) instead")] = False,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", help="fsspec option for an object store, KEY=VALUE, repeatable", show_default=False),
    ] = None,
) -> None:
    """Compare RUN with BASELINE per benchmark (paired by prompt where they share prompts; flips counted) and gate
    it: exit status 0 when no metric dropped beyond its threshold, 1 when one did, 2 on a usage error. The
    thresholds are the run's config's `gate:` section (per benchmark too); the options replace its default rule."""
    from core.store import Store
    from flows.compare import compare_runs
    from tasks.analysis.gate import describe
    from tasks.reporting.comparison import comparison_view
    from tasks.reporting.parts import text_lines

    overrides = {"max_drop": max_drop, "rule": rule, "metrics": metric or None}
    result = compare_runs(Store(store, parse_options(option or [])), run_id, baseline_id, overrides)
    doc, verdict = result.comparison, result.comparison.gate
    assert verdict is not None  # compare_runs always gates
    if as_json:
        typer.echo(doc.model_dump_json(indent=2))
    else:
        view = comparison_view(doc)
        typer.echo(f"{run_id} against {result.baseline.run_id}: {view.summary}")
        typer.echo("\n".join(text_lines(view.table)))
        for s in view.flip_summaries:
            typer.echo(f"flips in {s.benchmark}: {s.line}")
        for f in view.flips:
            typer.echo(f"  {f.benchmark}  {f.direction}  {f.prompt_id}  {f.baseline} -> {f.current}")
        typer.echo(describe(verdict))
    if not verdict.passed:
        raise typer.Exit(GATE_FAILED)
