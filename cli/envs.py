"""`evalflow envs list|kinds|check`: the environments this machine can run, the extractor and scorer kinds a task
file can name, and a check of one environment against its data."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from cli.common import fail, parse_options

app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode="markdown",
    help="The benchmark environments: evalflow's own, installed plugins' (entry points `evalflow.envs`), yours.",
)

PROMPT_CHARS = 400  # of each rendered prompt shown by `check`


@app.command("list")
def list_envs(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Every registered environment: name, where it comes from, version, kind, options (with defaults), metrics."""
    from envs.catalog import describe

    found, broken = describe()
    if as_json:
        typer.echo(json.dumps({"envs": [asdict(s) for s in found], "broken": broken}, indent=2))
        return
    for s in found:
        options = ", ".join(f"{k}={v}" for k, v in s.options.items()) or "-"
        typer.echo(f"{s.name}  v{s.version}  {s.kind}  from {s.origin}")
        typer.echo(f"    options: {options}")
        typer.echo(f"    metrics: {', '.join(s.metrics) or '-'}")
    for name, why in broken.items():
        typer.echo(f"{name}  NOT LOADABLE: {why}")


@app.command("kinds")
def list_kinds(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Every extractor and scorer kind a task file can name (evalflow's own and installed plugins', entry points
    `evalflow.extractors` and `evalflow.scorers`): name, where it comes from, its options with their defaults."""
    from envs.catalog import describe_kinds

    found, broken = describe_kinds()
    if as_json:
        typer.echo(json.dumps({"kinds": [asdict(k) for k in found], "broken": broken}, indent=2))
        return
    for k in found:
        options = ", ".join(f"{n}={v}" for n, v in k.options.items()) or "-"
        typer.echo(f"{k.group} {k.name}  from {k.origin}{'  (' + '; '.join(k.flags) + ')' if k.flags else ''}")
        if k.summary:
            typer.echo(f"    {k.summary}")
        typer.echo(f"    options: {options}")
    for name, why in broken.items():
        typer.echo(f"{name}  NOT LOADABLE: {why}")


@app.command()
def check(
    env: Annotated[
        str, typer.Argument(help="a registered name, package.module:Class, path/to/file.py:Class or path/to/task.yaml")
    ],
    dataset: Annotated[
        str | None,
        typer.Option("--dataset", help="JSONL/parquet/CSV path or URL, or hf-dataset:... (default: the env's)"),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="rows to render and score (all rows are validated)")] = 5,
    option: Annotated[
        list[str] | None, typer.Option("--option", help="an environment option KEY=VALUE (JSON value), repeatable")
    ] = None,
) -> None:
    """Validate every row of the environment's data, render the first prompts, and score each reference answer as
    if it were the completion: a task whose references do not score as correct has a broken extractor or scorer.
    Relative paths start from the working directory. Exits 1 when a reference fails to score."""
    from core.config import BenchmarkConfig
    from core.overrides import validated
    from envs.catalog import check as check_env

    try:
        options = parse_options(option or [])
        # paths resolved as in a config; a bad reference is a `config error:` naming the field
        bench = validated(BenchmarkConfig, {"name": env, "options": options, "dataset": dataset})
        result = check_env(bench.env_ref, bench.dataset, limit, options)
    except (ValueError, OSError) as exc:  # a DatasetError names file and line; a config error its field
        fail("envs check", exc)
    s = result.env
    typer.echo(f"{s.name} v{s.version} ({s.kind}, {s.origin}): {result.rows} rows valid in {result.source}")
    if result.tools:
        typer.echo(f"tools: {', '.join(result.tools)}")
    for item in result.checked:
        typer.echo(f"\n--- {item.prompt_id}")
        prompt = item.prompt if len(item.prompt) <= PROMPT_CHARS else item.prompt[:PROMPT_CHARS] + " ..."
        typer.echo(prompt)
        typer.echo(f"reference: {item.reference}")
        if item.error is not None:
            typer.echo(f"scoring the reference FAILED: {item.error}")
        elif item.reward is not None:
            verdict = "correct" if item.success else "NOT correct"
            typer.echo(f"reference as completion: {verdict} (reward {item.reward}, parsed {item.parsed_answer!r})")
    if result.scored or any(c.error for c in result.checked):
        bad = len(result.checked) - result.correct
        typer.echo(f"\n{result.correct}/{len(result.checked)} reference answers score as correct")
        if bad:
            typer.echo(
                f"{bad} reference answer(s) do not score as correct: check the extractor and scorer "
                "(for some built-ins, e.g. ifeval, the reference is no completion)"
            )
            raise typer.Exit(1)
