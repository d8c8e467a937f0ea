"""The documentation site (docs/, mkdocs.yml) and the README, kept true to the code, without servers.

Every config field and every command, argument and option has a description (the generated reference shows
them); the strict build passes (a broken link, anchor or placeholder fails it); every command line of a `bash`
block parses against the real command line, names a Makefile target or a deployment in prefect.yaml, and names
files that exist; every error kind has its troubleshooting section. The walk-throughs themselves run in
tests/examples/test_readme_own_benchmark_e2e.py, tests/flows/test_training_run_e2e.py and
tests/cli/test_compare_command.py.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from docs._hooks import cli_reference, code_reference, model_reference, reference
from tests.conftest import REPO_ROOT

DOCS = REPO_ROOT / "docs"
README = REPO_ROOT / "README.md"
PAGES = sorted(DOCS.rglob("*.md"))
# a bash block, its fence possibly indented (a block inside a list item)
BASH_BLOCK = re.compile(r"^([ \t]*)```bash\n(.*?)^\1```", flags=re.MULTILINE | re.DOTALL)
SHELL_OPERATORS = {"&&", "||", ";", "|", "(", ")", "&"}
# RUN_ID, BASELINE_ID, $RUN_ID, <flow run id>: a reader's own value
PLACEHOLDER = re.compile(r"^(\$?\{?[A-Z][A-Z0-9_]*\}?|<[^>]*>)$")
# a path in the repository named on a command line: it must exist
REPO_PATH = re.compile(r"^(?![a-z][a-z0-9+.-]*:)[\w.-]+/[\w./-]*\.(yaml|yml|py|jsonl|json|parquet|sbatch)(:\w+)?$")
MAKE_TARGET = re.compile(r"^([A-Za-z0-9][\w.-]*)\s*:(?!=)", flags=re.MULTILINE)


def test_every_config_field_has_a_description() -> None:
    missing = [
        f"{model.__name__}.{name} (at {', '.join(p for p in paths if p) or 'the top level'})"
        for model, paths in model_reference.config_models()
        for name, info in model.model_fields.items()
        if not (info.description or "").strip()
    ]
    assert not missing, f"config fields without a description (the reference and the UI form show it): {missing}"


def test_every_command_argument_and_option_has_help() -> None:
    missing: list[str] = []
    for path, command, ctx in cli_reference.walk_commands(cli_reference.cli_group()):
        if not (command.help or "").strip():
            missing.append(path)
        params = cli_reference.visible_params(command, ctx)
        missing += [f"{path} {p.name}" for p in params if not (p.help or "").strip()]
    assert not missing, f"commands, arguments or options without help: {missing}"


def test_every_error_kind_has_its_troubleshooting_section_and_every_error_class_a_docstring() -> None:
    page = (DOCS / "troubleshooting.md").read_text()
    assert not reference.missing_error_kinds(page), "add `<!-- generated: error-kind KIND -->` sections"
    undocumented = [f"{name} ({file})" for classes in code_reference.error_classes().values()
                    for name, file, doc in classes if not doc]  # fmt: skip
    assert not undocumented, f"error classes without a docstring (troubleshooting shows it): {undocumented}"


def test_record_notes_name_fields_the_code_leaves_undescribed() -> None:
    assert not model_reference.record_notes_problems()


def test_the_strict_build_passes_and_the_reference_is_generated(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    warnings = [line for line in built.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert built.returncode == 0, "\n".join(warnings) or built.stderr[-3000:]
    config = (site / "reference/config/index.html").read_text()
    assert "max_tokens" in config and "most tokens generated per completion" in config
    cli = (site / "reference/cli/index.html").read_text()
    assert "--max-drop" in cli and "evalflow envs check" in cli
    runs = (site / "reference/run-files/index.html").read_text()
    assert "ended_in_reasoning" in runs and "env_metrics" in runs
    assert "generated:" not in config + cli + runs  # every placeholder was filled
    assert not (site / "_hooks").exists()


def test_the_readme_is_short_and_keeps_its_two_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < 150
    assert "\nmake demo    # " in text and "\nmake test    # " in text
    for target in re.findall(r"\]\(((?!https?://|#)[^)#\s]+)(?:#[^)]*)?\)", text):
        assert (REPO_ROOT / target).exists(), f"README.md links {target}, which does not exist"


# ---------------------------------------------------------------------------------------------- command lines


def command_lines() -> Iterator[tuple[str, int, str]]:
    """(file, line number, command line) for every line of every `bash` block of the docs and the README, a
    line continued with a backslash joined to the next."""
    for path in [README, *PAGES]:
        text = path.read_text()
        for block in BASH_BLOCK.finditer(text):
            first = text.count("\n", 0, block.start(2)) + 1
            pending, start = "", first
            for i, raw in enumerate(block.group(2).splitlines()):
                line = raw[len(block.group(1)) :] if raw.startswith(block.group(1)) else raw
                if not pending:
                    start = first + i
                if line.rstrip().endswith("\\"):
                    pending += line.rstrip()[:-1] + " "
                    continue
                yield str(path.relative_to(REPO_ROOT)), start, pending + line
                pending = ""


def commands(line: str) -> Iterator[list[str]]:
    """The simple commands of a shell line (split at `&&`, `||`, `;`, pipes and `$( )`), each without its leading
    `NAME=value` assignments and with its comment cut."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, "#"
    words: list[str] = []
    for token in [*lexer, ";"]:
        if token in SHELL_OPERATORS or set(token) <= set("&|;()"):
            while words and re.match(r"^\w+=", words[0]):
                words.pop(0)
            if words:
                yield words
            words = []
        else:
            words.append(token)


def evalflow_args(words: list[str]) -> list[str] | None:
    if words[:3] == ["uv", "run", "evalflow"]:
        return words[3:]
    if words[:1] == ["evalflow"] or words[:1] == [".venv/bin/evalflow"]:
        return words[1:]
    return None


def parse_problem(args: list[str]) -> str | None:
    """Why `evalflow ARGS` would not parse (None: it does): the command resolved and its arguments and options
    parsed by the real command line, nothing invoked; placeholders stand for a reader's value."""
    from typer import _click

    command: Any = cli_reference.cli_group()
    ctx = _click.Context(command, info_name="evalflow")
    args = ["1" if PLACEHOLDER.match(a) else a for a in args]
    while getattr(command, "commands", None) and args and args[0] in command.commands:
        name = args.pop(0)
        command = command.commands[name]
        ctx = _click.Context(command, info_name=name, parent=ctx)
    if "--help" in args:
        return None
    if getattr(command, "commands", None):
        return f"{ctx.command_path}: no command {args[0]!r}" if args else f"{ctx.command_path} needs a command"
    try:
        command.make_context(ctx.info_name, list(args), parent=ctx.parent)
    except _click.ClickException as exc:
        return f"{ctx.command_path}: {exc.format_message()}"
    return missing_files(args)


def missing_files(words: list[str]) -> str | None:
    """The repository paths a command line names (`configs/demo.yaml`, `examples/envs/shop_env.py:ShopEnv`) that
    do not exist."""
    missing = [w for w in words if REPO_PATH.match(w) and not (REPO_ROOT / w.split(":")[0]).exists()]
    return f"no such file in the repository: {missing}" if missing else None


def test_every_command_line_in_the_docs_runs_as_written() -> None:
    targets = set(MAKE_TARGET.findall((REPO_ROOT / "Makefile").read_text()))
    deployments = code_reference.deployment_names()
    problems: list[str] = []
    seen = 0
    for file, number, line in command_lines():
        for words in commands(line):
            where = f"{file}:{number}: {line.strip()}"
            args = evalflow_args(words)
            if args is not None:
                seen += 1
                problem = parse_problem(args)
                if problem:
                    problems.append(f"{where}\n    {problem}")
            elif missing := missing_files(words):
                problems.append(f"{where}\n    {missing}")
            elif words[0] == "make":
                unknown = [w for w in words[1:] if not w.startswith("-") and "=" not in w and w not in targets]
                if unknown:
                    problems.append(f"{where}\n    not a Makefile target: {unknown}")
            elif words[:3] == ["prefect", "deployment", "run"] and words[3:] and words[3] not in deployments:
                problems.append(
                    f"{where}\n    not a deployment in prefect.yaml: {words[3]}; known: {sorted(deployments)}"
                )
    assert seen > 40, f"only {seen} evalflow command lines found in the docs' bash blocks"
    assert not problems, "command lines that would not run as written:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "line, problem",
    [
        ("uv run evalflow compare RUN_ID --max-drop 0.02", None),
        ("uv run evalflow compare RUN_ID --max-dorp 0.02", "No such option"),
        ("uv run evalflow reports serve --port PORT", None),
        ("uv run evalflow envs chek x", "no command 'chek'"),
        ("uv run evalflow run --config configs/nowhere.yaml", "no such file"),
        ("uv run evalflow watch --interval 0", "1"),
    ],
)
def test_the_command_line_check_catches_what_a_reader_would_hit(line: str, problem: str | None) -> None:
    (words,) = list(commands(line))
    args = evalflow_args(words)
    assert args is not None
    found = parse_problem(args)
    assert (found is None) if problem is None else (found is not None and problem in found), found
