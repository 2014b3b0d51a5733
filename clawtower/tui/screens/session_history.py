"""Mode 4's history view (`h` on a session, issue 37): the session's turns as its log has
them (number, when, the message taken, tool calls, tokens, the reply's first line; a fork's
copied turns first, marked), from core's `SessionReads.history` (core/sessions/history.py).
`f` forks the session at the chosen turn: the message box is prefilled with that turn's
message (edit it; empty forks without a new turn), a y/n confirms, and core's
`Sessions.fork` writes the fork; mode 4 then shows the new session. A refusal (a flow's
session, a turn not ended) is core's one line, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from functools import partial
from typing import Any, ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual import work
from textual.binding import Binding, BindingType

from clawtower.core import ClawError
from clawtower.core.describe import one_line
from clawtower.core.textsafe import safe, safe_line

from ..columns import Column
from ..commands import mode_help
from ..modals import ConfirmScreen, EditTextScreen
from ..model import Delta, fmt_datetime, fmt_time
from ..render import Palette, kv_table
from ..rowlist import Cell
from ..views import ItemList
from .base import ListDetailScreen, explained

TURN_TONE = {"done": "done", "ok": "done", "running": "active", "queued": "waiting",
             "waiting": "waiting", "error": "failed", "failed": "failed",
             "stopped": "failed", "timeout": "failed"}


class TurnList(ItemList):
    """A session's turns, oldest first."""

    columns: ClassVar[Sequence[Column]] = (
        Column("#", width=4, justify="right"), Column("When", width=8, hide_below=48),
        Column("Status", fit=9, min_width=6), Column("Tools", fit=16, hide_below=64),
        Column("Tokens", fit=7, justify="right", hide_below=56),
        Column("Message", ratio=1, min_width=12),
    )
    empty_text = "no turns yet — send the session a message (mode 4, `i`)"

    def row_cells(self, key: Hashable, data: Any) -> Sequence[Cell]:
        tools = ", ".join(c["name"] for c in data["tool_calls"]) or "-"
        status = str(data["status"])
        mark = "↩ " if data.get("copied_from") else ""
        return [
            (str(data["n"]), "key"), (fmt_time(data["at"]), "dim"),
            (status, TURN_TONE.get(status, "idle")), (one_line(tools), "dim"),
            (f"{data['tokens']:,}", "dim"), one_line(mark + str(data["message"] or "-")),
        ]

    def row_search_text(self, key: Hashable, data: Any) -> str:
        return f"{data['n']} {data['status']} {data['message']} {data['reply']}"

    def row_sort_key(self, key: Hashable, data: Any) -> Any:
        return int(data["n"])

    @staticmethod
    def version(item: dict[str, Any]) -> Hashable:
        return (item["status"], item["end_seq"], item["tokens"])


class SessionHistoryScreen(ListDetailScreen):
    """One session's turns, pushed over mode 4 (`esc` or `h` goes back); `f` forks."""

    HELP = mode_help(
        "**History** of the session: its turns as the log has them (when, the message it "
        "took, tool calls, tokens, the reply's first line; ↩ marks a fork's copied turns). "
        "`f` forks the session at the selected turn: edit the message the fork runs as its "
        "new turn (prefilled with that turn's; empty: no new turn), confirm, and mode 4 "
        "shows the new session. The original is untouched. A flow's session goes back with "
        "`R` on its node in mode 7. `esc` goes back.", ())
    MODE = "sessions"
    PREFIX = "his"
    LIST_TITLE = "Turns"
    SECTIONS: ClassVar[list[tuple[str, str]]] = [
        ("head", ""), ("turn", "Turn"), ("message", "Message"), ("tools", "Tool calls"),
    ]
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "escape", "Back", id="history.back", tooltip="Back to the session"),
        Binding("h", "back", "Back", show=False, id="history.close"),
        Binding("f", "fork", "Fork here", id="history.fork",
                tooltip="Fork the session at the selected turn (edit the new message)"),
        explained("f", "fork"),
    ]

    def __init__(self, session: dict[str, Any],
                 on_forked: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.session = session  # the session's row in mode 4 (id, agent, created_by, ...)
        self.session_id = str(session["id"])
        self.on_forked = on_forked
        self.history: dict[str, Any] | None = None
        self.turns: list[dict[str, Any]] = []
        self.first_read = False

    def rows_read(self) -> bool:
        return super().rows_read() and self.first_read

    # -- data

    def make_list(self) -> ItemList:
        return TurnList()

    def items(self) -> list[dict[str, Any]]:
        return self.turns

    def changes(self, delta: Delta) -> tuple[bool, set[str]]:
        sid = self.session_id
        hit = any(e.entity_id == sid or (e.type.startswith("turnjob.") and getattr(
            e.payload, "session_id", None) == sid) for e in delta.events)
        return hit, {"*"} if hit else set()

    def sync(self) -> None:
        self._update_bar()
        self.refresh_history()

    def apply(self, delta: Delta) -> None:
        changed, _ = self.changes(delta)
        if changed:
            self.refresh_history()
        self._update_bar()

    @work(exclusive=True, group="session-history")
    async def refresh_history(self) -> None:
        store = self.capp.store
        if store is None:
            return
        from clawtower.core.sessions.reads import SessionReads

        try:
            history = await SessionReads(store).history(self.session_id)
        except ClawError as exc:
            self.notify(str(exc), severity="error")
            return
        if self._tearing_down():
            return
        self.history = history
        self.turns = [{**t, "id": str(t["n"])} for t in history["turns"]]
        self.first_read = True
        self._list()
        self.reload()

    async def fetch(self, key: str) -> dict[str, Any] | None:
        return next((t for t in self.turns if t["id"] == key), None)

    # -- actions

    def unavailable(self, action: str) -> str | None:
        if action == "fork":
            if not self.turns:
                return f"{self.session_id} has no turns yet: nothing to fork"
            if self.detail is None:
                return "no turn selected"
        return super().unavailable(action)

    def action_back(self) -> None:
        self.app.pop_screen()

    def back(self) -> None:  # esc with no filter to clear
        self.app.pop_screen()

    def action_fork(self) -> None:
        turn = self.detail
        if turn is None:
            return
        sid, n = self.session_id, int(turn["n"])

        def confirmed(message: str | None, ok: bool | None) -> None:
            if ok:
                self._fork(n, message)

        def edited(text: str | None) -> None:
            if text is None:
                return
            message = text if text.strip() else None
            then = (f"then runs this message as its turn {n + 1}:\n\n{one_line(text, 300)}"
                    if message else "with no new turn (send it a message later).")
            self.app.push_screen(ConfirmScreen(
                f"Fork {sid} at turn {n}?",
                f"A new session gets {sid}'s transcript up to the end of turn {n}, {then}"
                f"\n\nThe copied turns' tool calls are history: none runs again. {sid} is"
                f" untouched. By {self.capp.operator}.", yes="Fork", no="Not now",
                destructive=False), partial(confirmed, message))

        self.app.push_screen(EditTextScreen(
            f"Fork {sid} at turn {n}: the new message",
            f"The fork keeps turns 1–{n}. Edit the message it runs as its new turn.",
            str(turn["message"] or ""), hint="empty: fork without a new turn"), edited)

    @work(group="session-fork")
    async def _fork(self, at: int, message: str | None) -> None:
        store = self.capp.store
        if store is None:
            return
        from clawtower.core.sessions.service import Sessions

        sid = self.session_id
        try:
            out = await Sessions(store).fork(sid, at, message=message,
                                             by=self.capp.operator)
        except ClawError as exc:
            flow = str(self.session.get("created_by") or "").startswith("flow:")
            self.notify(str(exc), title="Not forked: use R on its node in mode 7" if flow
                        else "Not forked", severity="error", timeout=10)
            return
        new = str(out["session"])
        self.notify(f"{new}: forked from {sid} at turn {at}"
                    + (" · its new turn is queued" if out.get("sent") else ""), title="Fork")
        if self.app.screen is self:
            self.app.pop_screen()
        if self.on_forked is not None:
            self.on_forked(new)

    # -- drawing

    def _render_detail(self) -> None:
        if not self.is_mounted:
            return
        self.refresh_bindings()
        pal = Palette(self.app)
        h = self.history
        if h is None:
            self._set("head", Text("loading…", style=pal.tone("idle")))
            return
        self._set("head", history_head(pal, self.session, h))
        t = self.detail
        if t is None:
            for key in ("turn", "message", "tools"):
                self._set(key, None)
            return
        self._set("turn", turn_renderable(pal, t), f"Turn {t['n']} · f: fork here")
        self._set("message", Text(safe(str(t["message"]))) if t["message"] else
                  Text("(no message of its own: it took an announce or continued)",
                       style=pal.tone("idle")))
        self._set("tools", tools_renderable(pal, t["tool_calls"]) if t["tool_calls"] else
                  None, f"Tool calls · {len(t['tool_calls'])}")


def history_head(pal: Palette, session: dict[str, Any], h: dict[str, Any]) -> RenderableType:
    head = Text()
    head.append(f"{h['session']}  ", style=pal("accent", "bold"))
    head.append(one_line(str(session.get("title") or ""), 80), style="bold")
    meta = f"agent {session.get('agent', '?')} · {len(h['turns'])} turn(s)"
    o = h.get("origin")
    if o:
        meta += f" · forked from {o['session']} at turn {o['turn']} by {o['by']}"
    return Group(head, Text(safe_line(meta), style=pal.tone("idle")))


def turn_renderable(pal: Palette, t: dict[str, Any]) -> RenderableType:
    rows: list[tuple[str, Any]] = [
        ("when", fmt_datetime(t["at"])),
        ("status", Text(str(t["status"]) + (f" (approval {t['approval']})"
                                            if t.get("approval") else ""),
                        style=pal.tone(TURN_TONE.get(str(t["status"]), "idle")))),
        ("tokens", f"{t['tokens']:,} ({t['prompt_tokens']:,} in, {t['completion_tokens']:,}"
                   " out)"),
        ("model", safe_line(str(t["model"]))),
        ("reply", safe_line(str(t["reply"] or "-"))),
    ]
    if t.get("copied_from"):
        rows.append(("copied", f"from {t['copied_from']} (history: nothing ran again)"))
    return kv_table(pal, rows)


def tools_renderable(pal: Palette, calls: list[dict[str, Any]]) -> RenderableType:
    lines = []
    for c in calls:
        line = Text(f"{c['name']}", style="bold")
        if c.get("tier"):
            line.append(f" [{c['tier']}]", style=pal.tone("idle"))
        args = c.get("arguments")
        if args:
            line.append(f"  {one_line(str(args), 160)}", style=pal.tone("idle"))
        lines.append(line)
    return Group(*lines)


__all__ = ["SessionHistoryScreen", "TurnList"]
