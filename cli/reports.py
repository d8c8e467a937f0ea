"""`evalflow reports ...`: browse a run store's reports (index, runs, sweeps) over HTTP."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import parse_options
from core.config import StoreConfig

DEFAULT_STORE = StoreConfig().url  # the repo's reports/, where runs go unless a config says otherwise

app = typer.Typer(no_args_is_help=True, rich_markup_mode="markdown", help="Browse the reports in a run store.")


@app.command()
def serve(
    store: Annotated[
        str, typer.Option("--store", help="the run store: a folder, file://... or s3://bucket/prefix")
    ] = DEFAULT_STORE,
    host: Annotated[str, typer.Option(help="address to listen on (loopback: only this machine)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="0 picks a free port")] = 8000,
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option",
            help="fsspec option for an object store, KEY=VALUE, repeatable (e.g. endpoint_url=http://127.0.0.1:9000)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve the store's index.html and every report it links, until interrupted (Ctrl-C).

    Prints the index URL first. An object store is read through fsspec (credentials from the
    environment, e.g. AWS_ACCESS_KEY_ID), so the pages' relative links work as on disk.
    """
    from core.store import Store
    from tasks.reporting.serve import index_url, make_server

    options = parse_options(option or [])  # a malformed one: `config error: --option ...`, exit status 2
    server = make_server(Store(store, options), host, port)
    typer.echo(f"serving {store} at {index_url(server)}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
