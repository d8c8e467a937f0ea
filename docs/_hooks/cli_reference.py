"""The command line's reference: every `evalflow` command, argument and option, from the typer app itself."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

from docs._hooks.markdown_text import REPO_ROOT, cell, code, escape, on_path, slug, table


def cli_group() -> Any:
    """The `evalflow` command group (typer's own click)."""
    on_path()
    import typer

    from cli.main import app

    return typer.main.get_command(app)


def walk_commands(group: Any) -> Iterator[tuple[str, Any, Any]]:
    """Every command and group under `group` (itself first), as (command path, command, its context)."""
    from typer import _click

    def walk(command: Any, name: str, parent: Any) -> Iterator[tuple[str, Any, Any]]:
        ctx = _click.Context(command, info_name=name, parent=parent)
        yield ctx.command_path, command, ctx
        for sub_name, sub in getattr(command, "commands", {}).items():
            if not sub.hidden:
                yield from walk(sub, sub_name, ctx)

    return walk(group, "evalflow", None)


def visible_params(command: Any, ctx: Any) -> list[Any]:
    """A command's arguments and options as `--help` lists them, less `--help` itself."""
    return [p for p in command.get_params(ctx) if not getattr(p, "hidden", False) and p.name != "help"]


def _param_name(p: Any) -> str:
    if p.param_type_name == "argument":
        return f"`{p.name.upper()}`" + (" ..." if p.nargs == -1 else "")
    return " / ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])


def _param_type(p: Any, ctx: Any) -> str:
    if getattr(p, "is_flag", False):
        return "flag"
    kind = p.display_type(ctx).strip("<>")
    kind = re.sub(r"^list\[(.*)\]$", r"\1", kind) if (p.multiple or p.nargs == -1) else kind
    kind = kind.replace(" range", "")
    if "|" in kind:
        kind = " \\| ".join(code(choice) for choice in kind.split("|"))
    bounds = [f"≥ {p.min:g}" if getattr(p, "min", None) is not None else "",
              f"≤ {p.max:g}" if getattr(p, "max", None) is not None else ""]  # fmt: skip
    kind = " ".join([kind, *[b for b in bounds if b]])
    if p.multiple:
        kind += ", repeatable"
    elif p.nargs == -1:
        kind += ", any number"
    return kind


def _param_default(p: Any) -> str:
    if p.required:
        return "required"
    default = p.default
    if getattr(p, "is_flag", False):
        if p.secondary_opts:
            return f"`{p.opts[0] if default else p.secondary_opts[0]}`"
        return "off" if not default else "on"
    if default is None or default == [] or callable(default):
        return ""
    return code(default)


def command_help(command: Any) -> str:
    """A command's help as markdown (the app's `rich_markup_mode`), escaped like a cell's text."""
    return escape(inspect.cleandoc(command.help or "").replace(str(REPO_ROOT), "<repo>"), pipes=False)


def cli_markdown() -> str:
    """Every command: its help, usage line, and a table of its arguments and options (type, default, help)."""
    parts: list[str] = []
    group = cli_group()
    for path, command, ctx in walk_commands(group):
        depth = path.count(" ")
        if depth == 0:
            continue  # the page itself says what `evalflow` is; its commands follow
        heading = "##" if depth == 1 else "###"
        parts.append(f"{heading} `{path}`\n\n{command_help(command)}\n")
        usage = command.get_usage(ctx).removeprefix("Usage: ")
        parts.append(f"```text\n{usage}\n```\n")
        subcommands = {n: c for n, c in getattr(command, "commands", {}).items() if not c.hidden}
        if subcommands:
            rows = [[f"[`{path} {n}`](#{slug(f'{path} {n}')})", cell(inspect.cleandoc(c.help or "").split("\n\n")[0])]
                    for n, c in subcommands.items()]  # fmt: skip
            parts.append(table(["command", "what it does"], rows) + "\n")
        params = visible_params(command, ctx)
        if params:
            rows = [[_param_name(p), _param_type(p, ctx), _param_default(p), cell(p.help or "")] for p in params]
            parts.append(table(["argument / option", "type", "default", "description"], rows) + "\n")
    return "\n".join(parts)


def cli_overview() -> str:
    """One line per command: the first sentence of its help, linked to its section."""
    rows: list[list[str]] = []
    for path, command, _ctx in walk_commands(cli_group()):
        if path.count(" ") == 0 or getattr(command, "commands", None):
            continue
        first = re.split(r"(?<=\.)\s+(?=[A-Z])", inspect.cleandoc(command.help or "").split("\n\n")[0])[0]
        rows.append([f"[`{path}`](#{slug(path)})", cell(first)])
    return table(["command", "what it does"], rows)
