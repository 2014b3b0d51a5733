"""A list's columns and their widths: fixed, sized by their content, or flexible.

Why a module of its own: the width rule (fitted columns take their widest cell, shrinking
toward their floor when the row is short, a kept one last; low-value columns leave narrow
lists; flexible columns share the rest) is pure arithmetic, tested and reused apart from
the widget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.cells import cell_len


@dataclass(frozen=True)
class Column:
    label: str
    width: int = 0  # fixed width; 0 = flexible (or sized by content, with `fit`)
    ratio: int = 1  # share of the leftover width among flexible columns
    min_width: int = 6  # a flexible column's floor; how far a fitted one shrinks when short
    justify: Literal["left", "right"] = "left"
    fit: int = 0  # > 0: as wide as its widest cell or label, at most `fit` cells
    hide_below: int = 0  # the list is narrower than this: the column is left out
    keep: bool = False  # a fitted column cut only once the other fitted ones are at floor


def column_widths(cols: Sequence[Column], width: int, fitted: dict[int, int]) -> list[int]:
    """Each column's width at `width` (-1: left out); `fitted` is the widest cell seen per
    fitted column's index."""
    fit_index = [i for i, c in enumerate(cols) if c.fit]
    shown = [width >= c.hide_below for c in cols]
    gaps = sum(shown) - 1
    widths = [0 if not shown[i] else c.width or (
        min(c.fit, max(cell_len(c.label), fitted.get(i, 0))) if c.fit else 0)
        for i, c in enumerate(cols)]
    flex = [i for i, c in enumerate(cols) if shown[i] and not c.width and not c.fit]
    short = sum(cols[i].min_width for i in flex) - (width - gaps - sum(widths))
    while short > 0:
        wide = [i for i in fit_index if shown[i] and widths[i] > cols[i].min_width]
        wide = [i for i in wide if not cols[i].keep] or wide  # a kept column gives last
        if not wide:
            break
        widths[max(wide, key=lambda i: widths[i])] -= 1
        short -= 1
    spare = max(0, width - gaps - sum(widths))
    total = sum(cols[i].ratio for i in flex) or 1
    given = 0
    for i in flex:
        share = spare * cols[i].ratio // total
        widths[i] = share
        given += share
    if flex:  # the rounding remainder goes to the last flexible column
        widths[flex[-1]] += spare - given
    return [w if shown[i] else -1 for i, w in enumerate(widths)]  # -1: left out
