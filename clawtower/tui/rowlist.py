"""RowList: a small Line-API list that stays fast with tens of thousands of rows.

A DataTable re-renders every visible cell and rebuilds table-sized lists on any update
(see reference/textual.md). RowList instead keeps:
- rows by key, each with a version (the store's seq of its last change);
- per-group sorted lists (bisect), so a phase change moves one row, not a resort;
- a line cache keyed by (key, version, cursor, focus, width, filter), so a frame renders only
  rows whose version changed, and a changed row off screen costs nothing until scrolled to;
- for columns sized by content (`Column(fit=N)`), the widest cell seen, measured once per
  changed row, so the flexible column (a title) gets every cell the others do not need.

Subclasses say how a row looks (`row_cells`), where it sorts (`row_sort_key`) and, for a
grouped list, which group it belongs to (`row_group`). Group headers collapse with enter.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, ClassVar, Literal

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from clawtower.core.textsafe import safe_line

from .columns import Column, column_widths

Cell = str | tuple[str, str | None]
Entry = tuple[Literal["g", "r"], Hashable]

TONES = ("waiting", "active", "done", "failed", "idle", "dim", "key")


class RowList(ScrollView, can_focus=True):
    """A keyed, optionally grouped, filterable list rendered line by line."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "rowlist--header", "rowlist--group", "rowlist--cursor", "rowlist--cursor-blur",
        "rowlist--match", "rowlist--empty", *(f"rowlist--{t}" for t in TONES),
    }

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "cursor_up", "Up", show=False, id="list.up"),
        Binding("down,j", "cursor_down", "Down", show=False, id="list.down"),
        Binding("home,g", "cursor_first", "First", show=False, id="list.first"),
        Binding("end,G", "cursor_last", "Last", show=False, id="list.last"),
        Binding("pageup", "page_up", "Page up", show=False, id="list.page-up"),
        Binding("pagedown", "page_down", "Page down", show=False, id="list.page-down"),
        Binding("enter", "select", "Open", id="list.open", tooltip="Open the row under the cursor"),
    ]

    columns: ClassVar[Sequence[Column]] = ()
    grouped: ClassVar[bool] = False
    group_order: ClassVar[Sequence[str]] = ()
    empty_text: ClassVar[str] = "nothing here"
    waiting_text: ClassVar[str] = "loading…"  # shown instead while `waiting` (set_waiting)
    tail: ClassVar[bool] = False  # follow new rows at the end (a log)
    blur_cursor: ClassVar[bool] = True  # show where the cursor is while unfocused

    class Highlighted(Message):
        """The cursor moved onto a row (key) or a group header (key None)."""

        def __init__(self, rowlist: RowList, key: Hashable | None) -> None:
            super().__init__()
            self.rowlist = rowlist
            self.key = key

        @property
        def control(self) -> RowList:
            return self.rowlist

    class Selected(Message):
        """Enter (or a second click) on a row."""

        def __init__(self, rowlist: RowList, key: Hashable) -> None:
            super().__init__()
            self.rowlist = rowlist
            self.key = key

        @property
        def control(self) -> RowList:
            return self.rowlist

    def __init__(self, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._data: dict[Hashable, Any] = {}
        self._version: dict[Hashable, Hashable] = {}
        self._placed: dict[Hashable, tuple[str, Any]] = {}
        self._order: dict[str, list[tuple[Any, Hashable]]] = {}
        self._lines: list[Entry] = []
        self._line_of: dict[Hashable, int] = {}
        self._group_counts: dict[str, int] = {}
        self._collapsed: set[str] = set()
        self._filter = ""
        self._match: dict[Hashable, bool] = {}
        self._cache: LRUCache[tuple[Any, ...], Strip] = LRUCache(2048)
        self._widths: tuple[int, list[int]] = (-1, [])
        self._fit_index = [i for i, c in enumerate(self.columns) if c.fit]
        self._fit: dict[int, int] = {}  # column index -> widest cell seen
        self._fit_stale = False  # rows left: the widest may have gone; measure all again
        self.cursor = 0
        self._cursor_entry: Entry | None = None
        self._structure_dirty = False
        self.waiting = False  # its rows are not read yet: an empty list says "loading…"

    # ------------------------------------------------------------------ subclass hooks

    def row_cells(self, key: Hashable, data: Any) -> Sequence[Cell]:
        return [str(data)]

    def row_sort_key(self, key: Hashable, data: Any) -> Any:
        return key

    def row_group(self, key: Hashable, data: Any) -> str:
        return ""

    def group_cells(self, group: str, count: int, collapsed: bool) -> Sequence[Cell]:
        mark = "▸" if collapsed else "▾"
        return [f"{mark} {group} ({count})"]

    def row_search_text(self, key: Hashable, data: Any) -> str:
        parts = []
        for c in self.row_cells(key, data):
            parts.append(c if isinstance(c, str) else c[0])
        return " ".join(parts)

    def set_waiting(self, waiting: bool) -> None:
        """Until its rows are first read (the store's first load), an empty list says
        `waiting_text`, never its empty-state text: nothing is missing, it is coming."""
        if waiting != self.waiting:
            self.waiting = waiting
            self.refresh()

    # ------------------------------------------------------------------ data API

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: Hashable) -> Any:
        return self._data.get(key)

    @property
    def visible_count(self) -> int:
        return sum(1 for kind, _ in self._lines if kind == "r")

    @property
    def lines(self) -> list[Entry]:
        return self._lines

    @property
    def filter_text(self) -> str:
        return self._filter

    @property
    def cursor_key(self) -> Hashable | None:
        """Key of the row under the cursor (None on a group header or an empty list)."""
        if 0 <= self.cursor < len(self._lines):
            kind, key = self._lines[self.cursor]
            return key if kind == "r" else None
        return None

    @property
    def cursor_group(self) -> str | None:
        if 0 <= self.cursor < len(self._lines):
            kind, key = self._lines[self.cursor]
            return str(key) if kind == "g" else None
        return None

    def set_rows(self, rows: Iterable[tuple[Hashable, Hashable, Any]]) -> None:
        """Make the list hold exactly `rows` (key, version, data); unchanged rows cost nothing."""
        rows = list(rows)
        keep = {k for k, _, _ in rows}
        gone = [k for k in self._data if k not in keep]
        self._remove(gone)
        self._upsert(rows)
        self._settle()

    def update_rows(self, rows: Iterable[tuple[Hashable, Hashable, Any]]) -> None:
        """Add or change `rows`; other rows are untouched."""
        self._upsert(rows)
        self._settle()

    def remove_rows(self, keys: Iterable[Hashable]) -> None:
        self._remove(list(keys))
        self._settle()

    def set_filter(self, text: str) -> None:
        text = text.strip()
        if text == self._filter:
            return
        self._filter = text
        self._match.clear()
        self._structure_dirty = True
        self._settle()

    def toggle_group(self, group: str) -> None:
        if group in self._collapsed:
            self._collapsed.discard(group)
        else:
            self._collapsed.add(group)
        self._structure_dirty = True
        self._settle()

    def move_cursor_to_key(self, key: Hashable) -> bool:
        idx = self._line_of.get(key)
        if idx is None:
            return False
        self._set_cursor(idx)
        return True

    # ------------------------------------------------------------------ internals

    def _upsert(self, rows: Iterable[tuple[Hashable, Hashable, Any]]) -> None:
        visible: list[int] = []
        for key, version, data in rows:
            if key in self._data and self._version.get(key) == version:
                continue
            self._data[key] = data
            self._version[key] = version
            if self._fit_index and self._measure(key, data):
                self._relayout()
            group = self.row_group(key, data) if self.grouped else ""
            sort_key = self.row_sort_key(key, data)
            placed = self._placed.get(key)
            if placed != (group, sort_key):
                if placed is not None:
                    self._unplace(key, placed)
                bisect.insort(self._order.setdefault(group, []), (sort_key, key))
                self._placed[key] = (group, sort_key)
                self._structure_dirty = True
            if self._filter:
                was = self._match.get(key)
                now = self._matches(key, data)
                if was is not now:
                    self._structure_dirty = True
            if not self._structure_dirty:
                idx = self._line_of.get(key)
                if idx is not None:
                    visible.append(idx)
        if not self._structure_dirty:
            top = self.scroll_offset.y
            bottom = top + self.scrollable_content_region.height
            for idx in visible:
                if top <= idx < bottom:
                    self.refresh_line(idx + 1)  # line 0 is the column header

    def _unplace(self, key: Hashable, placed: tuple[str, Any]) -> None:
        group, sort_key = placed
        items = self._order.get(group, [])
        i = bisect.bisect_left(items, (sort_key, key))
        if i < len(items) and items[i] == (sort_key, key):
            del items[i]
        if not items:
            self._order.pop(group, None)

    def _remove(self, keys: list[Hashable]) -> None:
        for key in keys:
            if key not in self._data:
                continue
            placed = self._placed.pop(key, None)
            if placed is not None:
                self._unplace(key, placed)
            del self._data[key]
            self._version.pop(key, None)
            self._match.pop(key, None)
            self._structure_dirty = True
            self._fit_stale = bool(self._fit_index)

    def _measure(self, key: Hashable, data: Any) -> bool:
        """Widen a fitted column when this row has its widest cell so far (True then). It
        never narrows here: a removal re-measures every row once, on the next layout."""
        cells = self.row_cells(key, data)
        grew = False
        for i in self._fit_index:
            if i < len(cells):
                cell = cells[i]
                n = cell_len(cell if isinstance(cell, str) else cell[0])
                if n > self._fit.get(i, 0):
                    self._fit[i] = n
                    grew = True
        return grew

    def _relayout(self) -> None:
        self._widths = (-1, [])
        self._cache.clear()
        self.refresh()

    def _matches(self, key: Hashable, data: Any) -> bool:
        ok = self._filter.casefold() in self.row_search_text(key, data).casefold()
        self._match[key] = ok
        return ok

    def _is_match(self, key: Hashable) -> bool:
        known = self._match.get(key)
        return known if known is not None else self._matches(key, self._data[key])

    def _groups_in_order(self) -> list[str]:
        known = [g for g in self.group_order if g in self._order]
        rest = sorted(g for g in self._order if g not in set(self.group_order))
        return known + rest

    def _settle(self) -> None:
        """Rebuild the line list if rows moved, appeared, vanished or the filter changed."""
        if not self._structure_dirty:
            return
        self._structure_dirty = False
        old_entry = self._cursor_entry
        at_end = bool(self._lines) and self.cursor >= len(self._lines) - 1
        lines: list[Entry] = []
        counts: dict[str, int] = {}
        for group in self._groups_in_order():
            items = self._order[group]
            if self._filter:
                keys = [k for _, k in items if self._is_match(k)]
            else:
                keys = [k for _, k in items]
            if not keys:
                continue
            counts[group] = len(keys)
            if self.grouped:
                lines.append(("g", group))
                if group in self._collapsed:
                    continue
            lines.extend(("r", k) for k in keys)
        self._lines = lines
        self._group_counts = counts
        self._line_of = {k: i for i, (kind, k) in enumerate(lines) if kind == "r"}
        width = self.scrollable_content_region.width or self.size.width
        self.virtual_size = Size(width, len(lines) + 1)
        # Keep the cursor on the same row (or group) wherever it went.
        target = self.cursor
        if self.tail and (at_end or not self.has_focus):
            target = len(lines) - 1
        elif old_entry is None and self.grouped:
            target = next((i for i, (kind, _) in enumerate(lines) if kind == "r"), 0)
        elif old_entry is not None:
            kind, key = old_entry
            if kind == "r" and key in self._line_of:
                target = self._line_of[key]
            elif kind == "g":
                for i, entry in enumerate(lines):
                    if entry == old_entry:
                        target = i
                        break
        self.cursor = max(0, min(target, len(lines) - 1))
        self._cursor_entry = lines[self.cursor] if lines else None
        self._scroll_to_cursor()
        self.call_after_refresh(self._scroll_to_cursor)
        self.refresh()
        if self._cursor_entry != old_entry:
            self.post_message(self.Highlighted(self, self.cursor_key))

    def _set_cursor(self, idx: int) -> None:
        if not self._lines:
            return
        idx = max(0, min(idx, len(self._lines) - 1))
        if idx == self.cursor and self._cursor_entry == self._lines[idx]:
            return
        old = self.cursor
        self.cursor = idx
        self._cursor_entry = self._lines[idx]
        self.refresh_line(old + 1)
        self.refresh_line(idx + 1)
        self._scroll_to_cursor()
        self.post_message(self.Highlighted(self, self.cursor_key))

    def _scroll_to_cursor(self) -> None:
        if self.scrollable_content_region.height < 2:
            return  # not laid out (or hidden): on_resize scrolls once there is room
        height = self.scrollable_content_region.height - 1
        top = round(self.scroll_offset.y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, force=True)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False, force=True)

    # ------------------------------------------------------------------ actions

    def action_cursor_up(self) -> None:
        self._set_cursor(self.cursor - 1)

    def action_cursor_down(self) -> None:
        self._set_cursor(self.cursor + 1)

    def action_cursor_first(self) -> None:
        self._set_cursor(0)

    def action_cursor_last(self) -> None:
        self._set_cursor(len(self._lines) - 1)

    def action_page_up(self) -> None:
        self._set_cursor(self.cursor - max(1, self.scrollable_content_region.height - 2))

    def action_page_down(self) -> None:
        self._set_cursor(self.cursor + max(1, self.scrollable_content_region.height - 2))

    def action_select(self) -> None:
        group = self.cursor_group
        if group is not None:
            self.toggle_group(group)
            return
        key = self.cursor_key
        if key is not None:
            self.post_message(self.Selected(self, key))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y < 1:
            return
        idx = round(self.scroll_offset.y) + offset.y - 1
        if not 0 <= idx < len(self._lines):
            return
        if idx == self.cursor or event.chain > 1:
            self._set_cursor(idx)
            self.action_select()
        else:
            self._set_cursor(idx)

    def on_focus(self) -> None:
        self.refresh_line(self.cursor + 1)

    def on_blur(self) -> None:
        self.refresh_line(self.cursor + 1)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()

    def on_resize(self) -> None:
        self.virtual_size = Size(self.scrollable_content_region.width, len(self._lines) + 1)
        self.call_after_refresh(self._scroll_to_cursor)

    # ------------------------------------------------------------------ rendering

    def _column_widths(self, width: int) -> list[int]:
        """The columns' widths at `width` (tui/columns.py), re-measured after removals."""
        if self._fit_stale:
            self._fit_stale = False
            self._fit = {}
            for key, data in self._data.items():
                self._measure(key, data)
            self._widths = (-1, [])
            self._cache.clear()
        if self._widths[0] == width:
            return self._widths[1]
        widths = column_widths(self.columns or [Column("")], width, self._fit)
        self._widths = (width, widths)
        return widths

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"rowlist--{name}", partial=True)

    def _render_cells(self, cells: Sequence[Cell], width: int, *, highlight: bool) -> Text:
        text = Text(no_wrap=True, overflow="crop", end="")
        widths = self._column_widths(width)
        cols = self.columns or [Column("")]
        needle = self._filter.casefold() if highlight and self._filter else ""
        match_style = self._style("match") if needle else None
        last = max((i for i, w in enumerate(widths) if w >= 0), default=0)
        for i, (col, w) in enumerate(zip(cols, widths, strict=False)):
            if w < 0:
                continue
            cell = cells[i] if i < len(cells) else ""
            value, tone = (cell, None) if isinstance(cell, str) else cell
            piece = Text(safe_line(value.replace("\n", " ")), no_wrap=True, end="")
            if tone:
                piece.stylize(self._style(tone))
            if needle and match_style is not None:
                low = piece.plain.casefold()
                start = low.find(needle)
                while start >= 0:
                    piece.stylize(match_style, start, start + len(needle))
                    start = low.find(needle, start + len(needle))
            if piece.cell_len > w:
                piece.truncate(w, overflow="ellipsis")
            pad = w - piece.cell_len
            if pad > 0:
                if col.justify == "right":
                    piece = Text(" " * pad, end="") + piece
                else:
                    piece.append(" " * pad)
            text.append_text(piece)
            if i < last:
                text.append(" ")
        return text

    def _strip(self, text: Text, width: int, extra: Style | None) -> Strip:
        base = self.rich_style
        if extra is not None:
            text.truncate(width, overflow="crop", pad=True)
            text.stylize(extra)
        segments = [Segment(s.text, base + s.style if s.style else base, s.control)
                    for s in text.render(self.app.console)]
        return Strip(segments).crop_extend(0, width, base)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if y == 0:
            key: tuple[Any, ...] = ("header", width)
            cached = self._cache.get(key)
            if cached is None:
                labels = [c.label for c in (self.columns or [Column("")])]
                cached = self._strip(self._render_cells(labels, width, highlight=False), width,
                                     self._style("header"))
                self._cache[key] = cached
            return cached
        idx = round(self.scroll_offset.y) + y - 1
        if idx >= len(self._lines):
            if idx == 0 and y == 1:
                key = ("empty", width, self._filter, self.waiting)
                cached = self._cache.get(key)
                if cached is None:
                    msg = f"  no rows match '{self._filter}'" if self._filter else \
                        f"  {self.waiting_text if self.waiting else self.empty_text}"
                    cached = self._strip(Text(msg), width, self._style("empty"))
                    self._cache[key] = cached
                return cached
            return Strip.blank(width, self.rich_style)
        kind, k = self._lines[idx]
        is_cursor = idx == self.cursor
        focus = self.has_focus
        if kind == "g":
            group = str(k)
            count = self._group_counts.get(group, 0)
            collapsed = group in self._collapsed
            key = ("g", group, count, collapsed, is_cursor, focus, width)
        else:
            key = ("r", k, self._version.get(k), is_cursor, focus, width, self._filter)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        cursor_style = None
        if is_cursor and (focus or self.blur_cursor):
            cursor_style = self._style("cursor" if focus else "cursor-blur")
        if kind == "g":
            text = Text(no_wrap=True, end="", style=self._style("group"))
            for cell in self.group_cells(group, count, collapsed):
                value, tone = (cell, None) if isinstance(cell, str) else cell
                text.append(value, self._style(tone) if tone else None)
        else:
            text = self._render_cells(self.row_cells(k, self._data[k]), width, highlight=True)
        strip = self._strip(text, width, cursor_style)
        self._cache[key] = strip
        return strip
