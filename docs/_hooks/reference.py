"""The documentation's reference, generated from the code: placeholders in the pages, filled by docs/_hooks/hook.py.

A page asks for a generated part with a placeholder comment on a line of its own, `<!-- generated: NAME -->` or
`<!-- generated: NAME ARG -->`; `fill` replaces it with what `BUILDERS[NAME]` returns, built from the code itself:
every `evalflow` command and option (the typer app), every config field (the pydantic models under `EvalConfig`),
the rollout files' columns (`core.schema`), metrics.json's keys (`core.record`), the built-in environments and
task kinds (their registries), the error kinds (`errors` and every `EvalflowError` subclass) and the performance
benchmarks (bench/). Nothing of it is written twice: a renamed option or field changes the site with the code.
tests/test_docs.py calls the same functions.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from docs._hooks import cli_reference as cli
from docs._hooks import code_reference as code
from docs._hooks import model_reference as models
from docs._hooks.markdown_text import on_path

PLACEHOLDER = re.compile(r"^<!-- generated: ([a-z-]+)(?: ([A-Za-z0-9_.-]+))? -->$", flags=re.MULTILINE)


def fill(markdown: str, where: str = "page") -> str:
    """The page with every placeholder replaced by its generated markdown; an unknown one fails the build."""
    on_path()

    def replace(match: re.Match[str]) -> str:
        name, arg = match.group(1), match.group(2)
        builder = BUILDERS.get(name)
        if builder is None:
            raise ValueError(f"{where}: unknown placeholder {match.group(0)!r}; known: {', '.join(BUILDERS)}")
        return builder(arg) if arg else builder()

    filled = PLACEHOLDER.sub(replace, markdown)
    malformed = [line for line in filled.splitlines() if line.lstrip().startswith("<!-- generated")]
    if malformed:
        raise ValueError(f"{where}: a placeholder is a line `<!-- generated: NAME -->` of its own: {malformed[0]!r}")
    return filled


def missing_error_kinds(markdown: str) -> list[str]:
    """The error kinds a troubleshooting page has no generated section for."""
    on_path()
    from errors import KINDS

    return [k for k in KINDS if f"<!-- generated: error-kind {k} -->" not in markdown]


BUILDERS: dict[str, Callable[..., str]] = {
    "cli": cli.cli_markdown,
    "cli-overview": cli.cli_overview,
    "config": models.config_markdown,
    "rollout-columns": models.rollout_columns_markdown,
    "metrics-json": models.metrics_json_markdown,
    "index-entry": models.index_entry_markdown,
    "env-options": code.env_options_markdown,
    "env-metrics": code.env_metrics_markdown,
    "task-kinds": code.task_kinds_markdown,
    "errors-overview": code.errors_overview,
    "error-kind": code.error_kind_markdown,
    "command-prefixes": code.command_prefixes_markdown,
    "bench": code.bench_markdown,
}
