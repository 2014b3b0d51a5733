"""Rich renderables shared by several screens: theme-aware styles, tables, an approval
as the operator reads it, agent usage."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text
from textual.app import App
from textual.widgets import Static

from clawtower.core.agents.usage import UsageTotals, format_usage
from clawtower.core.textsafe import drop_unsafe, is_safe, safe, safe_line

from .model import PHASE_TONE, fmt_datetime


def show_section(section: Static, renderable: RenderableType | None, title: str | None) -> None:
    """Fill a detail section, or hide it when there is nothing to show."""
    if renderable is None:
        section.display = False
        return
    if title is not None:
        section.border_title = title
    section.update(renderable)
    section.display = True


class Fitted:
    """A renderable that picks its wide form when the section has `need` cells and its
    compact form otherwise (a table whose cells would be cut to a few letters): the choice
    is made at render time, so a resize or a narrow terminal re-decides it."""

    def __init__(self, need: int, wide: Callable[[], RenderableType],
                 compact: Callable[[], RenderableType]) -> None:
        self.need = need
        self.wide = wide
        self.compact = compact

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.wide() if options.max_width >= self.need else self.compact()


def table_need(*cells: list[str], padding: int = 2) -> int:
    """Cells a no-wrap table needs: the widest of each column plus the gaps between them."""
    return sum(max((len(c) for c in col), default=0) for col in cells) + padding * (
        len(cells) - 1)


class Palette:
    """Rich styles taken from the active theme's variables (re-read on every render)."""

    def __init__(self, app: App[Any]) -> None:
        v = app.theme_variables
        self.vars = v

    def __call__(self, name: str, extra: str = "") -> str:
        colour = self.vars.get(name, "")
        return f"{extra} {colour}".strip()

    def tone(self, tone: str | None, extra: str = "") -> str:
        if tone is None:
            return extra
        if tone in ("dim", "idle"):
            return f"{extra} {self.vars.get('phase-idle', '')}".strip()
        return self(f"phase-{tone}", extra)

    def phase(self, phase: str, extra: str = "") -> str:
        return self.tone(PHASE_TONE.get(phase, "idle"), extra)


def columns_table(pal: Palette, *columns: str | tuple[str, dict[str, Any]]) -> Table:
    table = Table(box=None, expand=True, pad_edge=False, show_edge=False,
                  header_style=pal.tone("idle", "bold"), padding=(0, 1))
    for col in columns:
        name, kw = (col, {}) if isinstance(col, str) else col
        table.add_column(name, **kw)
    return table


def kv_table(pal: Palette, rows: list[tuple[str, Any]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style=pal.tone("idle"), no_wrap=True)
    table.add_column(ratio=1)
    for k, v in rows:
        table.add_row(k, v if isinstance(v, Text) else Text(str(v)))
    return table


def usage_totals(usage: list[dict[str, Any]]) -> UsageTotals:
    """The sum of `usage` projection rows (one subject, any agents and models)."""
    return UsageTotals(calls=sum(int(u.get("calls") or 0) for u in usage),
                       prompt_tokens=sum(int(u.get("prompt_tokens") or 0) for u in usage),
                       completion_tokens=sum(int(u.get("completion_tokens") or 0)
                                             for u in usage),
                       cost_usd=sum(float(u.get("cost_usd") or 0) for u in usage))


def usage_line(usage: list[dict[str, Any]]) -> str:
    """"3 calls · 1,234 tok (1,000 in / 234 out) · $0.0012" (the cost only when priced)."""
    return format_usage(usage_totals(usage))


def usage_renderable(pal: Palette, usage: list[dict[str, Any]]) -> RenderableType:
    priced = any(float(u.get("cost_usd") or 0) > 0 for u in usage)
    cols: list[Any] = ["Agent", "Model", ("Calls", {"justify": "right"}),
                       ("Prompt tokens", {"justify": "right"}),
                       ("Completion tokens", {"justify": "right"})]
    if priced:
        cols.append(("Cost", {"justify": "right"}))
    table = columns_table(pal, *cols)
    for u in usage:
        cells = [u["agent"], u["model"], str(u["calls"]), str(u["prompt_tokens"]),
                 str(u["completion_tokens"])]
        if priced:
            cells.append(f"${float(u.get('cost_usd') or 0):.4f}")
        table.add_row(*cells)
    return table


def _context_value(value: Any) -> str:
    """Context values as an operator reads them: lists one item a line, no internal keys."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(f"• {_context_value(v)}" for v in value) or "—"
    if isinstance(value, dict):
        return " · ".join(f"{k}: {_context_value(v)}" for k, v in value.items()
                          if k not in ("idem_key",))
    return json.dumps(value, sort_keys=True)


# What `a` and `r` do on a workflow gate (the run continues or ends in this console).
GATE_VERBS = {
    "workflow_approval": (" approve: the run continues   ", " reject: the run is cancelled"),
    "workflow_input": (" answer (JSON, checked against the schema)   ",
                       " reject: the run is cancelled"),
}


def approval_renderable(pal: Palette, a: dict[str, Any], *, keys: bool) -> RenderableType:
    """What an approval asks, in its own words, with its context and preview."""
    head = Text()
    head.append(safe_line(a["title"]), style="bold")
    rows: list[tuple[str, Any]] = [
        ("id", a["id"]), ("kind", a["kind"]), ("subject", a["subject"]),
        ("asked by", f"{a['requested_by']} at {fmt_datetime(a['requested_at'])}"),
    ]
    if a.get("required_approver"):
        rows.append(("approver", f"only {a['required_approver']} may decide"))
    if a.get("require_different"):
        rows.append(("approver", f"someone other than {a['requested_by']}"))
    parts: list[RenderableType] = [head, Text(""), Text(safe(a["prompt"]))]
    if a.get("preview"):  # what will happen comes first; the bookkeeping after
        parts += [Text(""), Text("Preview", style="bold"),
                  Text(safe(a["preview"]), style=pal("accent"))]
    parts += [Text(""), kv_table(pal, rows)]
    ctx = a.get("context") or {}
    if ctx:
        ctx_rows = [(str(k), _context_value(v)) for k, v in ctx.items()]
        parts += [Text(""), Text("Context", style="bold"), kv_table(pal, ctx_rows)]
    if keys:
        verbs = GATE_VERBS.get(a["kind"], (" approve   ", " reject (asks a reason)"))
        hint = Text("\n")
        hint.append(" a ", style=pal.tone("done", "bold reverse"))
        hint.append(verbs[0])
        hint.append(" r ", style=pal.tone("failed", "bold reverse"))
        hint.append(verbs[1])
        if a["kind"] == "acp_permission":  # a coding harness asks (core/acp)
            hint.append("\n A ", style=pal.tone("done", "bold reverse"))
            hint.append(" always allow ")
            hint.append(" R ", style=pal.tone("failed", "bold reverse"))
            hint.append(" always reject (this harness, workspace and tool kind)")
        parts.append(hint)
    return Group(*parts)


def install_terminal_guard() -> None:
    """The console's last line of defence: no segment reaches the terminal with a control,
    bidi or invisible formatting character in it, whichever widget drew it.

    Screens show untrusted text as visible escapes (core/textsafe.py) before layout; this
    catches whatever one missed, after layout, by dropping those characters (Rich gives
    them no cells, so nothing moves). Rich itself strips only BEL, BS, VT, FF and CR: ESC,
    C1 and bidi overrides pass through Textual to the terminal (tests/tui/test_textsafe.py)."""
    from rich.segment import Segment
    from textual.strip import Strip

    if getattr(Strip.render, "clawtower_guard", False):
        return
    original = Strip.render

    def render(self: Strip, console: Any) -> str:
        if getattr(self, "_render_cache", None) is None and not all(
                is_safe(seg.text) for seg in self):
            clean = Strip([Segment(drop_unsafe(seg.text), seg.style, seg.control)
                           for seg in self], self.cell_length)
            self._render_cache = original(clean, console)
        return original(self, console)

    render.clawtower_guard = True  # type: ignore[attr-defined]
    Strip.render = render  # type: ignore[method-assign]
