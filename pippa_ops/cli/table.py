"""Tables that fit the terminal: a long label is cut, then columns are dropped by priority.

``pippa ps``, ``pippa runs`` and ``pippa hosts`` give a column list; what does not fit the width goes:
the ``flex`` column (a label, never an id or anything to copy) is cut with "…" to FLEX_CAP, then the
optional columns go (highest ``drop`` first), then the flex column gives more, or takes back the room
the dropped columns left. A caller adds a column (a cost, say) as one more ``Column``. Plain text, no
rich: the lines are what a test compares at 80 columns.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from pippa_contract.termsafe import escape

GAP = 2
FLEX_CAP = 24  # a label column short of room is cut to this before optional columns go
WIDE = 240  # output that is not a terminal (a pipe, a file): wide, every column, whole ids


@dataclass(frozen=True)
class Column:
    name: str
    drop: int = 0  # 0: always shown; otherwise dropped when short of room, the highest first
    flex: bool = False  # may be shortened with "…" down to ``min_width``
    min_width: int = 6
    right: bool = False  # numbers


def terminal_width() -> int:
    """COLUMNS when set, else the terminal's width, else WIDE (not a terminal)."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    if sys.stdout.isatty():
        return shutil.get_terminal_size((80, 24)).columns
    return WIDE


def _widths(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> list[int]:
    return [max([len(c.name), *(len(escape(r[i])) for r in rows)]) for i, c in enumerate(columns)]


def natural_width(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> int:
    """The width of the table with every column whole."""
    return sum(_widths(columns, rows)) + GAP * (len(columns) - 1)


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> tuple[list[int], list[int]]:
    """Which columns stay (indices) and every column's width, for a table at most ``width`` wide
    (gaps of GAP) where dropping and cutting can do it. The dashboard's run list uses it too."""
    keep = list(range(len(columns)))
    widths = _widths(columns, rows)

    def total() -> int:
        return sum(widths[i] for i in keep) + GAP * (len(keep) - 1)

    natural = list(widths)
    flex = [i for i, c in enumerate(columns) if c.flex]
    if total() > width:  # a long label gives way to FLEX_CAP before any column is dropped
        for i in flex:
            widths[i] = min(widths[i], max(FLEX_CAP, len(columns[i].name)))
    for i in sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: (-columns[i].drop, -i)):
        if total() <= width:
            break
        keep.remove(i)
    for i in flex:  # then shrinks further, or takes back the room the dropped columns left
        floor = min(natural[i], max(columns[i].min_width, len(columns[i].name)))
        widths[i] = max(floor, min(natural[i], widths[i] + (width - total())))
    return keep, widths


def cut(text: str, width: int) -> str:
    """``text`` in ``width`` characters, "…" marking a cut."""
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def layout(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """The table's lines (header first), at most ``width`` wide where dropping and cutting can do it.
    Cells are host strings (commands, names, states): control characters show escaped (``termsafe``)."""
    rows = [[escape(c) for c in r] for r in rows]
    keep, widths = fit(columns, rows, width)

    def cell(text: str, i: int) -> str:
        text = cut(text, widths[i])
        return text.rjust(widths[i]) if columns[i].right else text.ljust(widths[i])

    lines = [[columns[i].name for i in keep], *([r[i] for i in keep] for r in rows)]
    return [(" " * GAP).join(cell(line[j], i) for j, i in enumerate(keep)).rstrip() for line in lines]
