"""The trace of the selected session (mode 4), flow (mode 7) or workflow run (mode 5) as a
waterfall, in a modal that scrolls (`w` opens it, `esc` or `w` closes it).

The same trace `clawtower trace ID` prints: derived from the log by core/traces (in a worker
thread, so a large log does not stop the console drawing) and drawn by its `waterfall.render`,
each line through textsafe. Core's trace modules load on the first `w`, not with the
console."""

from __future__ import annotations

from typing import ClassVar, cast

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from clawtower.core.textsafe import safe_line

from .protocol import ConsoleApp

BAR_WIDTH = 40


def trace_binding(what: str) -> list[BindingType]:
    """A list's `w` key (and its fallback that says why it cannot act)."""
    return [
        Binding("w", "screen.trace", "Trace", id=f"{what}.trace",
                tooltip=f"The selected {what}'s trace as a waterfall (spans from the log)"),
        Binding("w", "screen.explain('trace')", show=False, system=True),
    ]


def open_trace(screen: Screen[None], ident: str | None) -> None:
    """Show `ident`'s trace over `screen` (nothing selected: the key's fallback says why)."""
    if ident:
        screen.app.push_screen(TraceScreen(ident))


def no_trace(what: str, ident: str | None) -> str | None:
    """Why `w` cannot show a trace now, or None."""
    return None if ident else f"no {what} selected: no trace to show"


class TraceScreen(ModalScreen[None]):
    """One trace's waterfall: a header line, then a row per span (scrolls both ways)."""

    DEFAULT_CSS = """
    TraceScreen { align: center middle; }
    TraceScreen > #trace-dialog {
        width: 95%; height: 90%; border: round $accent; padding: 0 1;
        background: $surface;
    }
    TraceScreen #trace-scroll { height: 1fr; overflow-x: auto; }
    TraceScreen #trace-body { width: auto; }
    TraceScreen #trace-hint { color: $text-muted; height: 1; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,w,q", "close", "Close", id="trace.close"),
    ]

    def __init__(self, ident: str) -> None:
        super().__init__()
        self.ident = ident
        self.lines: list[str] = []  # the waterfall as drawn (tests read it)
        self.loaded = False

    def compose(self) -> ComposeResult:
        with Vertical(id="trace-dialog"):
            with VerticalScroll(id="trace-scroll"):
                yield Static(Text(f"reading the trace of {safe_line(self.ident)}…"),
                             id="trace-body")
            yield Static("esc closes · ↑↓ ←→ scroll", id="trace-hint")

    def on_mount(self) -> None:
        dialog = self.query_one("#trace-dialog")
        dialog.border_title = f"Trace of {safe_line(self.ident)}"
        self.query_one("#trace-scroll").focus()
        self._load()

    @work(group="trace-load", exclusive=True)
    async def _load(self) -> None:
        from clawtower.core import ClawError
        from clawtower.core.traces.read import find_trace
        from clawtower.core.traces.waterfall import render

        store = self.app_console.store
        if store is None:
            lines = ["the store is not open yet"]
        else:
            try:
                trace = await find_trace(store, self.ident, in_thread=True)
            except ClawError as exc:
                lines = [str(exc)]
            else:
                lines = render(trace, width=BAR_WIDTH)
        self.lines = [safe_line(line) for line in lines]
        self.loaded = True
        self.query_one("#trace-body", Static).update(Text("\n".join(self.lines),
                                                          no_wrap=True, overflow="crop"))

    @property
    def app_console(self) -> ConsoleApp:
        return cast(ConsoleApp, self.app)

    def action_close(self) -> None:
        self.dismiss(None)
