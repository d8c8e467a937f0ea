"""plotly.js for the pages with charts: one copy per store under `static/`, linked relatively, or inlined.

A page inside the store (report, index, sweep) loads `<store>/static/plotly-<version>.min.js` through a
relative link, so it works opened from a file, from `evalflow reports serve` and from an S3 website
alike, and weighs what its own content weighs (plotly.js alone is 4.8 MB). The copy is written once,
atomically, and rewritten only when its size is wrong. A self-contained page (one file to mail around,
`store.self_contained_reports`) and a page written outside the store inline the bundle instead.
"""

from __future__ import annotations

import functools

from markupsafe import Markup, escape
from plotly.offline import get_plotlyjs, get_plotlyjs_version

from core.record import RunInfo
from core.store import Store
from tasks.reporting.format import relative_link, relative_to_store

STATIC_DIR = "static"


@functools.cache
def plotly_bundle() -> tuple[str, bytes]:
    """(file name, content) of the plotly.js bundle that plotly.py ships."""
    return f"plotly-{get_plotlyjs_version()}.min.js", get_plotlyjs().encode("utf-8")


def ensure_plotly(store: Store) -> str:
    """The store path of the store's plotly.js, written first unless a copy of the right size is there."""
    name, data = plotly_bundle()
    path = f"{STATIC_DIR}/{name}"
    fs, fs_path = store.filesystem(store.path(STATIC_DIR, name))
    try:
        present = fs.size(fs_path) == len(data)
    except FileNotFoundError:
        present = False
    if not present:
        store.write_bytes(store.path(STATIC_DIR, name), data)
    return path


@functools.cache
def _inline() -> Markup:
    return Markup(f'<script type="text/javascript">{get_plotlyjs()}</script>')


def plotly_script(store: Store, page_url: str, self_contained: bool = False) -> Markup:
    """The <script> element that gives the page at `page_url` plotly.js: a relative link to the store's
    copy, or the bundle itself when `self_contained` or when the page lies outside the store."""
    page = relative_to_store(page_url, store.url)
    if self_contained or page == page_url:
        return _inline()
    src = relative_link(page, ensure_plotly(store))
    return Markup(f'<script type="text/javascript" src="{escape(src)}"></script>')


def self_contained_by_config(run_info: RunInfo) -> bool:
    """Whether the run's config asks for single-file reports (`store.self_contained_reports`)."""
    store = run_info.config.get("store")
    return isinstance(store, dict) and bool(store.get("self_contained_reports", False))
