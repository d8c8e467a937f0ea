"""The parts every page's view model is made of: tables, titled sections, charts and links.

They are renderer-agnostic, so the markdown and the HTML of a page draw the same cells from them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from markupsafe import Markup

from tasks.reporting.format import fmt_num, fmt_rate


@dataclass(frozen=True)
class Table:
    """Formatted cells; `note` is shown under the table (rows left out, how a column is computed)."""

    header: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass(frozen=True)
class Section:
    title: str
    table: Table


@dataclass(frozen=True)
class Chart:
    """A plotly figure as plotly's own div + script (plotly.js itself is inlined once per page)."""

    div_id: str
    title: str
    html: Markup


@dataclass(frozen=True)
class Link:
    label: str
    text: str
    href: str


def text_lines(table: Table) -> list[str]:
    """The table as aligned plain-text lines (header, a rule, the rows), for a terminal."""
    grid = [table.header, *table.rows]
    widths = [max(len(row[i]) for row in grid) for i in range(len(table.header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in grid]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def kv_table(pairs: Iterable[tuple[str, str]]) -> Table:
    """A two-column table of named values."""
    return Table(["", "value"], [[k, v] for k, v in pairs])


def count_table(label: str, counts: dict[str, int], total: int) -> Table:
    """How often each value occurs, with its share of `total`."""
    return Table(
        [label, "count", "share"],
        [[k, fmt_num(v), fmt_rate(v / total if total else None)] for k, v in counts.items()],
    )
