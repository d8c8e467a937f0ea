"""Text formatting shared by every report page: numbers, rates, intervals, durations, cells, slugs, links."""

from __future__ import annotations

import html
import os
import posixpath
import re
from pathlib import Path

from core.metrics_doc import Interval

NONE = "–"  # what an absent value shows as, in every table


def fmt_rate(value: float | None) -> str:
    return NONE if value is None else f"{value:.2%}"


def fmt_num(value: float | int | None, digits: int = 3) -> str:
    if value is None:
        return NONE
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}f}"


def fmt_ci(low: float | None, high: float | None, rate: bool = True) -> str:
    if low is None or high is None:
        return NONE
    if rate:
        return f"{low * 100:.1f}–{high * 100:.1f}%"
    return f"{low:.3f} – {high:.3f}"


def fmt_interval(interval: Interval | None, rate: bool = True) -> str:
    return NONE if interval is None else fmt_ci(interval.low, interval.high, rate)


def fmt_delta(value: float | None, rate: bool) -> str:
    if value is None:
        return NONE
    return f"{value * 100:+.2f} pp" if rate else f"{value:+.3f}"


def fmt_duration(seconds: float) -> str:
    minutes, sec = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {sec:02d}s" if hours else f"{minutes}m {sec:02d}s"


def clip(text: str | None, limit: int) -> str:
    """One line of at most `limit` characters (whitespace collapsed), for table cells."""
    if text is None:
        return NONE
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def md_cell(text: object) -> str:
    """Escape for a markdown table cell (Prefect renders HTML in markdown, so escape that too)."""
    return html.escape(" ".join(str(text).split()), quote=False).replace("|", "\\|")


def slug(text: str) -> str:
    """Lowercase letters, digits and dashes: for element ids and Prefect artifact keys."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def browser_url(url: str) -> str:
    """A link a browser can follow: local paths become file:// URLs, others stay as they are."""
    if "://" in url:
        return url
    return Path(url).resolve().as_uri()


def relative_to_store(url: str, store_url: str) -> str:
    """`url` relative to the store root ('runs/<id>/report.html'), or unchanged if outside it."""

    def norm(u: str) -> str:
        u = u[len("file://") :] if u.startswith("file://") else u
        return (u if "://" in u else os.path.abspath(u)).rstrip("/")

    root, target = norm(store_url), norm(url)
    if target.startswith(root + "/"):
        return target[len(root) + 1 :].replace(os.sep, "/")
    return url


def relative_link(page: str, target: str) -> str:
    """A link from the page at store path `page` to the store path `target` ('../../static/x.js')."""
    return posixpath.relpath(target, posixpath.dirname(page) or ".")
