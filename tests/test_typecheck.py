"""The type checker guards the code: `make lint` runs basedpyright with the project's settings, a planted type error
(and, in the strict folders, a missing annotation) fails it, and every ignore comment names its rule and reason."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CHECKER = REPO_ROOT / ".venv" / "bin" / "basedpyright"
# An ignore comment: the rule(s) in brackets, then `# why` (the reason a reader needs before touching it).
IGNORE = re.compile(r"#\s*(type|pyright):\s*ignore(?P<rules>\[[^\]]+\])?(?P<rest>.*)$")


def test_make_lint_runs_the_type_checker() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    lint = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "basedpyright" in lint
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert re.search(r'"basedpyright==[\d.]+"', pyproject), "the checker is pinned"
    assert 'strict = ["core", "errors", "envs/base.py", "evalflow"]' in pyproject


def _copy(tmp: Path) -> Path:
    """The project's settings and the strict folders, checked against the project's environment."""
    work = tmp / "copy"
    work.mkdir()
    shutil.copy(REPO_ROOT / "pyproject.toml", work)
    for folder in ("core", "errors", "envs", "evalflow"):
        shutil.copytree(REPO_ROOT / folder, work / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (work / ".venv").symlink_to(REPO_ROOT / ".venv")
    return work


def _check(work: Path, *paths: str) -> subprocess.CompletedProcess[str]:
    command = [str(CHECKER), "--project", str(work / "pyproject.toml"), *paths]
    return subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(not CHECKER.exists(), reason="basedpyright is installed by `uv sync` (make lint)")
def test_a_planted_type_error_fails_the_checker(tmp_path: Path) -> None:
    work = _copy(tmp_path)
    clean = _check(work, "core/reasoning.py", "envs/task_kinds.py")
    assert clean.returncode == 0, clean.stdout
    with (work / "core" / "reasoning.py").open("a") as f:
        f.write('\n\ndef planted() -> int:\n    return "not an int"\n\n\ndef untyped(value):\n    return value\n')
    with (work / "envs" / "task_kinds.py").open("a") as f:
        f.write('\n\nPLANTED: int = "not an int"\n\n\ndef untyped(value):\n    return value\n')
    failed = _check(work, "core/reasoning.py", "envs/task_kinds.py")
    assert failed.returncode == 1, failed.stdout
    out = failed.stdout
    assert re.search(r"core/reasoning\.py:\d+:\d+ - error: Type \"Literal\['not an int'\]\" is not assignable", out)
    assert re.search(r"envs/task_kinds\.py:\d+:\d+ - error: Type \"Literal\['not an int'\]\" is not assignable", out)
    # strict in core/: an unannotated parameter is an error; standard elsewhere: it is not
    assert re.search(r"core/reasoning\.py:\d+:\d+ - error: Type annotation is missing for parameter \"value\"", out)
    assert not re.search(r"envs/task_kinds\.py:\d+:\d+ - error: Type annotation is missing", out)


def _checked_files() -> list[Path]:
    """The files the checker reads (pyproject's include, less its exclude)."""
    folders = ("core", "errors", "envs", "sandbox", "tasks", "flows", "blocks", "cli", "ops", "evalflow", "examples")
    runtime_scripts = REPO_ROOT / "tasks" / "runtime" / "scripts"
    return [p for f in folders for p in (REPO_ROOT / f).rglob("*.py") if runtime_scripts not in p.parents]


def test_every_ignore_comment_names_its_rule_and_reason() -> None:
    bad = []
    for path in _checked_files():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = IGNORE.search(line)
            if m and (not m["rules"] or not re.match(r"\s*#\s*\S", m["rest"])):
                bad.append(f"{path.relative_to(REPO_ROOT)}:{n}: {line.strip()}")
    assert not bad, "an ignore needs [rule] and `# why` after it:\n" + "\n".join(bad)
