"""`evalflow rescore RUN_ID`: a new run from an existing run's completions, scored anew, with no server."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

import typer

from cli.common import fail
from cli.run import OVERRIDES_HELP
from core.config import StoreConfig

DEFAULT_STORE = StoreConfig().url


def rescore(
    run_id: Annotated[str, typer.Argument(help="the run whose completions are scored again")],
    overrides: Annotated[list[str] | None, typer.Argument(help=OVERRIDES_HELP, show_default=False)] = None,
    config: Annotated[
        str | None, typer.Option("--config", help="a config to score with instead of the run's own (same requests)")
    ] = None,
    store: Annotated[
        str | None, typer.Option("--store", help="the store holding the run (default: the config's, else reports/)")
    ] = None,
) -> None:
    """Score an existing run's completions again (a scorer, an option or an environment's code changed) and write
    the result as a new run whose record names the source run. Sends no request: a batch whose completions
    are not cached (its prompts, sampling or model differ) fails the command before anything is written."""
    from core.overrides import config_data
    from core.resolve import open_store
    from flows.rescore import rescore_config, source_record

    try:
        where = store or (StoreConfig.model_validate(config_data(config).get("store", {})).url if config else None)
        source = source_record(open_store(StoreConfig(url=where or DEFAULT_STORE)), run_id)
        resolved = rescore_config(source, config, overrides or [])
    except (ValueError, OSError) as exc:
        fail("invalid configuration", exc)
    from flows.eval import eval_flow
    from ops.api import started_api

    with started_api() as api, api.serving() if api else contextlib.nullcontext():
        result = asyncio.run(eval_flow(resolved, rescore_of=run_id))
    typer.echo(f"rescored {run_id} as {result.run_info.run_id}")
    assert result.collection is not None  # the flow's record of a run always says where its reports are
    for kind, url in result.collection.reports.items():
        typer.echo(f"{kind}: {url}")
