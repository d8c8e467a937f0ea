"""What the generated reference's markdown is made of: table cells, code spans, tables and heading anchors.

Text from the code (help, descriptions, docstrings) goes into a cell escaped: `<` and `>` outside code spans as
entities (a `<version>` is no HTML tag), pipes escaped, the checkout's own path shown as `<repo>`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def on_path() -> None:
    """The repository's packages importable: `mkdocs` runs from .venv/bin, whose folder is sys.path[0]."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))


def escape(text: str, pipes: bool) -> str:
    """Outside code spans: `<`/`>` as entities (a `<version>` is no HTML tag), and pipes escaped for a table."""
    plain = {"|": "\\|" if pipes else "|", "<": "&lt;", ">": "&gt;"}
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else re.sub(r"[|<>]", lambda m: plain[m.group(0)], p) for p in parts)


def cell(text: object) -> str:
    """Markdown text fit for a table cell: one line, the checkout's path shown as `<repo>`, escaped."""
    return escape(" ".join(str(text).replace(str(REPO_ROOT), "<repo>").split()), pipes=True)


def code(value: object) -> str:
    """A value as a code span (the checkout's path shown as `<repo>`)."""
    text = " ".join(str(value).replace(str(REPO_ROOT), "<repo>").split())
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def slug(name: str) -> str:
    """The anchor MkDocs (the toc extension's default slugify) gives a heading of this text."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", name).strip().lower())
