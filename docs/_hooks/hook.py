"""The MkDocs hook (mkdocs.yml's `hooks:`): every page's `<!-- generated: NAME -->` placeholders filled with the
reference built from the code (docs/_hooks/reference.py). `exclude_docs` keeps this folder out of the site."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


def on_config(config: Any) -> Any:
    # MkDocs loads this file by its path: the repository's packages (docs._hooks, cli, core, ...) importable
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    from docs._hooks.reference import fill

    return fill(markdown, page.file.src_uri)
