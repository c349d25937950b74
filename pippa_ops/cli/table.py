"""Tables that fit the terminal: a long label is cut, then columns are dropped by priority.

``pippa ps``, ``pippa runs`` and ``pippa hosts`` give a column list; what does not fit the width goes:
the ``flex`` columns (a label, a state whose whole reason is printed under the table; never an id or
anything to copy) are cut with "…" to FLEX_CAP (a ``cap``ped one to its other rows' width), then the
optional columns go (highest ``drop`` first), then the flex columns give more, or take back the room
the dropped columns left: one long state never costs every row its other columns. A caller adds a
column (a cost, say) as one more ``Column``. Plain text, no rich: the lines are what a test compares
at 80 columns.
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
    # a flex column with a cap (a state with its reason) short of room is cut to its widest cell of at
    # most ``cap`` before any column goes: one long cell never costs the table a column
    cap: int = 0


def terminal_width() -> int:
    """COLUMNS when set, else the terminal's width, else WIDE (not a terminal)."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    if sys.stdout.isatty():
        return shutil.get_terminal_size((80, 24)).columns
    return WIDE


def _widths(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> list[int]:
    return [max([len(c.name), *(len(escape(r[i])) for r in rows)]) for i, c in enumerate(columns)]


def _usual(c: Column, i: int, rows: Sequence[Sequence[str]]) -> int:
    """A capped column's width without its cells longer than the cap (those are cut, said in full below)."""
    return max([len(c.name), *(len(r[i]) for r in rows if len(r[i]) <= c.cap)])


def natural_width(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> int:
    """The width of the table with every column whole (a capped one at its usual width)."""
    whole = _widths(columns, rows)
    widths = [_usual(c, i, rows) if c.cap else whole[i] for i, c in enumerate(columns)]
    return sum(widths) + GAP * (len(columns) - 1)


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
            c = columns[i]  # a capped one: an outlier is cut to the others' width (its whole text goes below)
            widths[i] = min(widths[i], _usual(c, i, rows) if c.cap else max(FLEX_CAP, len(c.name)))
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
