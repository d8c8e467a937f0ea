"""Rendering: the jinja2 environments that turn a page's view model into markdown or HTML.

HTML templates (`*.html.j2`) are autoescaped, so model text (completions can contain anything) is
always escaped; the only markup passed through is plotly's own chart divs. Markdown templates
(`*.md.j2`) escape every interpolated value with the `md` filter (pipes, newlines and HTML, since
Prefect renders HTML inside markdown). CSS and JS live in `templates/static/` and are inlined; a page
with charts gets plotly.js as the `plotly` script element (assets.plotly_script: a relative link to the
store's copy, or inline), so a page opens from a file with no network.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import jinja2
from markupsafe import Markup

from tasks.reporting.format import md_cell

_LOADER = jinja2.PackageLoader("tasks.reporting", "templates")


def script_json(data: Any) -> Markup:
    """Data for a page's scripts, to sit inside a non-executed <script>: JSON with <, > and & escaped."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


@functools.cache
def html_env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=_LOADER,
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["script_json"] = script_json
    return env


@functools.cache
def markdown_env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=_LOADER,
        autoescape=False,  # markdown: values are escaped by the `md` filter instead
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["md"] = md_cell
    return env


def render_html(template: str, **context: Any) -> str:
    return html_env().get_template(template).render(**context)


def render_markdown(template: str, **context: Any) -> str:
    return markdown_env().get_template(template).render(**context)
