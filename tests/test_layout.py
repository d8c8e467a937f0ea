"""The code's shape, pinned: small modules that say what they are for, one run-store object, and
generic analysis and reporting that name no benchmark."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from envs.registry import ENVS, metric_specs
from tests.conftest import REPO_ROOT

MAX_LINES = 450
PACKAGES = ("core", "envs", "sandbox", "errors", "tasks", "flows", "blocks", "cli", "ops", "bench", "scripts", "tests")
GENERIC = ("tasks/analysis", "tasks/reporting")


def python_files(*roots: str) -> list[Path]:
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *roots],
                             cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    return [REPO_ROOT / f for f in tracked if f.endswith(".py") and (REPO_ROOT / f).exists()]


def test_no_module_over_the_line_limit() -> None:
    long = {
        str(p.relative_to(REPO_ROOT)): n
        for p in python_files(*PACKAGES)
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these modules (over {MAX_LINES} lines): {long}"


def test_every_module_says_what_it_is_for() -> None:
    missing = [
        str(p.relative_to(REPO_ROOT))
        for p in python_files(*PACKAGES)
        if p.stat().st_size and ast.get_docstring(ast.parse(p.read_text())) is None
    ]
    assert not missing, f"add a one-line module docstring to: {missing}"


def test_storage_options_is_a_parameter_of_nothing_but_the_store() -> None:
    """Every caller holds a core.store.Store; a config field of that name is fine, a parameter is not."""
    offenders = []
    for path in python_files("core", "envs", "tasks", "flows", "blocks", "cli", "ops", "bench"):
        if path == REPO_ROOT / "core" / "store.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                if any(a.arg == "storage_options" for a in args):
                    offenders.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {node.name}")
    assert not offenders, offenders


def _strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of a module's string literals, docstrings left out (they may give examples)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }  # fmt: skip
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


@pytest.mark.parametrize("folder", GENERIC)
def test_generic_code_names_no_benchmark_and_no_env_metric(folder: str) -> None:
    """Environments declare their metrics; analysis and reporting render whatever they declare."""
    specific = set(ENVS) | {spec.key for specs in metric_specs(ENVS).values() for spec in specs}
    pattern = re.compile(r"(?<![\w-])(" + "|".join(sorted(map(re.escape, specific))) + r")(?![\w-])", re.I)
    hits = []
    for path in python_files(folder):
        hits += [
            f"{path.relative_to(REPO_ROOT)}:{n}: {m.group(0)}" for n, s in _strings(path) if (m := pattern.search(s))
        ]
    for path in sorted((REPO_ROOT / folder).rglob("*.j2")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if match := pattern.search(line):
                hits.append(f"{path.relative_to(REPO_ROOT)}:{number}: {match.group(0)}")
    assert not hits, hits
