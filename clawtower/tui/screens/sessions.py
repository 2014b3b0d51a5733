"""Mode 4: sessions (core/sessions): the session tree (parent -> subagents, status, agent,
tokens, cost), the selected session's transcript (and what its last turn recalled, `m` for
the memory panel: tui/screens/memory.py), its announces and backlog, and an input
line: Enter sends (a busy session is steered at its next safe boundary), `/agent`,
`/model`, `/agents`, `/models`, `/spawn`, `/stop` run as commands (tab completes them).

Everything goes through core's read and write API (`core.sessions.service.Sessions`,
`core.sessions.commands`); the screen re-reads when the store's events touch sessions,
whichever process wrote them.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.binding import Binding, BindingType
from textual.suggester import SuggestFromList
from textual.widgets import Input, Static

from clawtower.core import ClawError
from clawtower.core.acp.views import session_activity
from clawtower.core.describe import one_line
from clawtower.core.sessions.commands import COMMANDS, is_command, run_command
from clawtower.core.sessions.service import Sessions

from ..columns import Column
from ..commands import mode_help
from ..model import Delta
from ..render import Palette
from ..rowlist import Cell, RowList
from ..sessionrender import (
    STATUS_TONE,
    acp_renderable,
    announces_table,
    backlog_renderable,
    head_renderable,
    recalled_line,
    streaming_renderable,
    transcript_renderable,
)
from ..traceview import no_trace, open_trace, trace_binding
from ..views import ItemList
from .base import ListDetailScreen

TRANSCRIPT_SHOWN = 60  # newest messages drawn
SESSION_EVENTS = ("session.", "turnjob.", "agentspec.")
OPEN = ("idle", "queued", "running", "waiting")  # a session that takes messages and commands


class SessionList(ItemList):
    """Sessions as a tree: each parent followed by its subagents."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("x", "screen.stop_session", "Stop", id="session.stop",
                tooltip="Stop the selected session and its active subagents"),
        Binding("n", "screen.spawn", "Spawn", id="session.spawn",
                tooltip="Spawn a subagent of the selected session (type its task)"),
        Binding("i", "screen.focus_input", "Message", id="session.input",
                tooltip="Type a message or a /command for the selected session"),
        Binding("a", "screen.approve_call", "Approve call", id="session.approve",
                tooltip="Approve the tool call the selected session waits for (y/n)"),
        Binding("r", "screen.reject_call", "Reject call", id="session.reject",
                tooltip="Reject the tool call the selected session waits for (asks why)"),
        Binding("m", "screen.memory", "Memory", id="session.memory",
                tooltip="The agent's memories and what each turn recalled (correct, forget)"),
        Binding("h", "screen.history", "History", id="session.history",
                tooltip="The session's turns; f forks it at one (edit and retry)"),
        *trace_binding("session"),
    ]

    columns: ClassVar[Sequence[Column]] = (
        Column("Session", fit=16, min_width=8), Column("Status", fit=12, min_width=8),
        Column("Agent", fit=12), Column("Tokens", fit=8, justify="right", hide_below=56),
        Column("Cost", fit=9, justify="right", hide_below=64),
        Column("Title", ratio=1, min_width=12),
    )
    empty_text = "no sessions yet — `clawtower session new`, then type a message below"

    def row_cells(self, key: Hashable, data: Any) -> Sequence[Cell]:
        depth = int(data.get("depth") or 0)
        label = ("  " * (depth - 1) + "└ " if depth else "") + str(data["id"])
        status, tone = session_status(data)
        return [
            (label, "key"),
            (status, tone),
            str(data["agent"]),
            (f"{data['tokens']:,}", "dim"),
            (f"${data['cost_usd']:.4f}", "dim"),
            one_line(str(data.get("title") or (data.get("task") or {}).get("prompt") or "")),
        ]

    def row_search_text(self, key: Hashable, data: Any) -> str:
        return f"{data['id']} {data['agent']} {data['status']} {data.get('title') or ''}"

    def row_sort_key(self, key: Hashable, data: Any) -> Any:
        return int(data.get("order") or 0)

    @staticmethod
    def version(item: dict[str, Any]) -> Hashable:
        return (item.get("last_seq"), item.get("depth"), item.get("order"))


def session_status(data: dict[str, Any]) -> tuple[str, str]:
    """A session's status in one short word and its tone: a session that finished other than
    ok says how (`error`, `timeout`, `stopped`), not `finished error`, which the column cut
    to `finished er…`."""
    status, result = str(data["status"]), str(data.get("result") or "")
    if status == "finished" and result and result != "ok":
        return result, "failed"
    return status, STATUS_TONE.get(status, "idle")


def flatten(forest: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The session tree in display order, each row with its depth: the sessions people
    started first, then the sessions flows started for their nodes (`created_by` flow:F-N),
    grouped by flow, so a demo's three sessions are not buried under thirty flow nodes."""
    out: list[dict[str, Any]] = []
    flows: dict[str, list[dict[str, Any]]] = {}
    top: list[dict[str, Any]] = []
    for n in forest:
        by = str(n.get("created_by") or "")
        if by.startswith("flow:"):
            flows.setdefault(by, []).append(n)
        else:
            top.append(n)

    def walk(nodes: list[dict[str, Any]], depth: int) -> None:
        for n in nodes:
            row = {k: v for k, v in n.items() if k != "children"}
            row["depth"] = depth
            row["order"] = len(out)
            out.append(row)
            walk(n.get("children") or [], depth + 1)

    walk([*top, *(n for group in flows.values() for n in group)], 0)
    return out


def touched(delta: Delta) -> tuple[bool, set[str]]:
    """Did the events of `delta` change sessions, and which ones."""
    ids: set[str] = set()
    for e in delta.events:
        if not e.type.startswith(SESSION_EVENTS):
            continue
        sid = getattr(e.payload, "session_id", None) or (
            e.entity_id if e.type.startswith("session.") else None)
        if sid:
            ids.add(str(sid))
        if e.type.startswith("agentspec."):
            ids.add("*")
    return bool(ids), ids


def acp_touches(delta: Delta, sid: str, detail: dict[str, Any] | None) -> bool:
    """Did `delta` move an ACP run of session `sid` (a new run, streamed text, a tool call, a
    plan, a permission request or its answer)? Text is committed at most ten times a second
    (core.acp.client.FLUSH_S), so following it from another process stays cheap."""
    acp = (detail or {}).get("acp") or []
    runs = {d["run"]["id"] for d in acp}
    asked = {p["approval_id"] for d in acp for p in d["permissions"]}
    for e in delta.events:
        if not e.type.startswith("acp."):
            continue
        if e.type == "acp.run_started" and getattr(e.payload, "subject", "") == sid:
            return True
        if e.entity_id in runs or e.entity_id in asked \
                or getattr(e.payload, "run_id", None) in runs:
            return True
    return False


class SessionsScreen(ListDetailScreen):
    """Mode 4: sessions, subagents, announces, backlog; send, steer, stop, spawn."""

    HELP = mode_help(
        "**Sessions** as a tree (parent → subagents), the selected transcript live, its "
        "announces and backlog. `i` types a message (Enter sends; a busy session is steered "
        "at its next safe boundary) or `/agent`, `/model`, `/agents`, `/models`, `/spawn`, "
        "`/stop` (tab completes); `n` spawns a subagent, `x` stops the session; `m` opens "
        "its agent's memory (what each turn recalled; correct or forget a memory); `h` opens "
        "its history (its turns: message, tool calls, tokens, reply), where `f` forks it at "
        "the selected turn with an edited message (the original is untouched); `w` shows its "
        "trace as a waterfall (its turns, model and tool calls, approval waits).",
        ())
    MODE = "sessions"
    PREFIX = "ses"
    LIST_TITLE = "Sessions"
    SECTIONS: ClassVar[list[tuple[str, str]]] = [
        ("head", ""), ("recalled", "Recalled"), ("transcript", "Transcript"),
        ("stream", "Streaming"), ("announces", "Announces"), ("backlog", "Backlog"),
        ("acp", "Harness"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self._by_id: dict[str, dict[str, Any]] = {}
        self._seen = -1  # the newest session row drawn (its last_seq)
        self._drawn_stream: tuple[str, int] | None = None
        self.first_read = False  # its rows come from its own read of the store
        self.wanted: str | None = None  # a session to select once it is listed (a fork)

    def on_mount(self) -> None:
        line = Input(placeholder="message or /command (enter sends; steers a busy session)"
                                 " · esc leaves", id="ses-input", suggester=SuggestFromList(
                         [f"{c} " for c in COMMANDS], case_sensitive=True))
        # the keyboard stays here after a send (steers come in a row): the box says how to
        # leave it, focused or not
        line.border_subtitle = "enter sends · esc leaves"
        self.mount(line, before=self.query_one("#filter-bar"))
        super().on_mount()
        self.set_interval(0.1, self._stream_tick)

    def rows_read(self) -> bool:
        return super().rows_read() and self.first_read  # its own read of the store too

    def _stream(self) -> dict[str, str] | None:
        """The selected session's turn text streaming in this console, until committed."""
        entry = self.capp.session_streams.get(self.selected or "")
        if entry is None or self.detail is None or self.detail.get("id") != self.selected:
            return None
        if any(m["meta"].get("turn") == entry["turn"] for m in self.detail["messages"]):
            return None  # the reply is in the transcript now
        return entry

    def _stream_tick(self) -> None:
        """Redraw only the streaming section (a frame stays cheap with a long transcript)."""
        entry = self._stream()
        drawn = (entry["turn"], len(entry["text"])) if entry else None
        if drawn != self._drawn_stream and self.is_mounted:
            self._draw_stream(entry)

    def _draw_stream(self, entry: dict[str, str] | None) -> None:
        was = self._drawn_stream
        self._drawn_stream = (entry["turn"], len(entry["text"])) if entry else None
        section = self.query_one("#ses-stream", Static)
        if entry is not None and was is not None and section.display:
            # the pane has a fixed height: new text repaints it alone, no layout pass
            section.update(streaming_renderable(Palette(self.app), entry["text"]),
                           layout=False)
            return
        self._set("stream", streaming_renderable(Palette(self.app), entry["text"])
                  if entry else None, f"Streaming · {entry['turn']}" if entry else None)

    # -- data

    def make_list(self) -> ItemList:
        return SessionList()

    def items(self) -> list[dict[str, Any]]:
        return self.rows

    def changes(self, delta: Delta) -> tuple[bool, set[str]]:
        changed, ids = touched(delta)
        sid = self.selected
        if sid is not None and sid not in ids and acp_touches(delta, sid, self.detail):
            ids.add(sid)  # the selected session's harness moved: redraw its Harness pane
            changed = True
        return changed, ids

    def list_extra(self, items: list[dict[str, Any]]) -> str:
        running = sum(1 for s in items if s.get("status") == "running")
        return f" · {running} running" if running else ""

    def sync(self) -> None:
        super().sync()
        self.refresh_rows(reload_detail=True)

    def apply(self, delta: Delta) -> None:
        changed, ids = self.changes(delta)
        if changed:
            self.refresh_rows(reload_detail=self.selected in ids or "*" in ids)
        self._update_bar()

    @work(exclusive=True, group="sessions-list")
    async def refresh_rows(self, reload_detail: bool = False) -> None:
        """Re-read the sessions that changed since the newest row seen (all of them only
        when one is new: the tree's order changes then), and redraw their rows."""
        if self.capp.store is None:
            return
        sessions = Sessions(self.capp.store)
        try:
            changed = await sessions.changed_since(self._seen) if self.rows else None
            if changed is None or any(c["id"] not in self._by_id for c in changed):
                self.rows = flatten(await sessions.tree())
                self.first_read = True
                self._by_id = {r["id"]: r for r in self.rows}
                self._seen = max((int(r["last_seq"]) for r in self.rows), default=-1)
                self._list()
            elif changed:
                for c in changed:
                    self._by_id[c["id"]].update(c)
                    self._seen = max(self._seen, int(c["last_seq"]))
                # only the changed rows are handed to the list (it keeps the others)
                lst = self.item_list
                lst.update_rows((r["id"], lst.version(self._by_id[r["id"]]),
                                 self._by_id[r["id"]]) for r in changed)
                lst.border_title = (f"{self.LIST_TITLE} · {len(self.rows)}"
                                    f"{self.list_extra(self.rows)}")
        except ClawError as exc:
            self.notify(str(exc), severity="error")
            return
        if reload_detail:
            self.reload()

    async def fetch(self, key: str) -> dict[str, Any] | None:
        assert self.capp.store is not None
        detail = await Sessions(self.capp.store).get(key)
        detail["acp"] = await session_activity(self.capp.store, key, limit=2)
        return detail

    # -- actions

    def action_focus_input(self) -> None:
        self.query_one("#ses-input", Input).focus()

    def action_spawn(self) -> None:
        line = self.query_one("#ses-input", Input)
        line.value = "/spawn "
        line.cursor_position = len(line.value)
        line.focus()

    def _waiting_call(self) -> str | None:
        """The approval id of the first tool call the selected session waits for."""
        waits = (self.detail or {}).get("approvals") or []
        if self.detail is None or self.detail.get("id") != self.selected or not waits:
            return None
        return str(waits[0]["id"])

    def action_approve_call(self) -> None:
        aid = self._waiting_call()
        if aid is not None:
            self.capp.request_approve(aid)

    def action_reject_call(self) -> None:
        aid = self._waiting_call()
        if aid is not None:
            self.capp.request_reject(aid)

    def action_trace(self) -> None:
        open_trace(self, self.selected)

    def unavailable(self, action: str) -> str | None:
        if action == "trace":
            return no_trace("session", self.selected)
        return super().unavailable(action)

    def action_memory(self) -> None:
        if self.selected is not None:
            from .memory import SessionMemoryScreen

            self.app.push_screen(SessionMemoryScreen(self.selected))

    def action_history(self) -> None:
        row = self._by_id.get(self.selected or "")
        if row is not None:
            from .session_history import SessionHistoryScreen

            self.app.push_screen(SessionHistoryScreen(row, on_forked=self.show_session))

    def show_session(self, sid: str) -> None:
        """Select `sid` (a fork just made): now if it is listed, else once it is."""
        self.wanted = sid
        if sid in self._by_id:
            self._list()
        else:
            self.refresh_rows(reload_detail=True)

    def before_select(self, lst: RowList) -> None:
        if self.wanted is not None and self.wanted in lst:
            lst.move_cursor_to_key(self.wanted)
            self.wanted = None

    def action_stop_session(self) -> None:
        if self.selected is not None:
            self._run(f"/stop stopped from the console by {self.capp.operator}")

    @on(Input.Submitted, "#ses-input")
    def _submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if self.selected is None:
            self.notify("select a session first (or create one: clawtower session new)",
                        severity="warning")
            return
        event.input.value = ""
        self._run(text)

    @work(group="session-input")
    async def _run(self, text: str) -> None:
        store, sid = self.capp.store, self.selected
        if store is None or sid is None:
            return
        sessions = Sessions(store)
        try:
            if is_command(text):
                from clawtower.core.agents.config import load_config

                out = await run_command(sessions, sid, text, cfg=load_config(),
                                        by=self.capp.operator)
                self.notify(out.text, title=text.split()[0], timeout=8)
            else:
                sent = await sessions.send(sid, text, sender=self.capp.operator)
                if sent.get("busy"):
                    self.notify(f"{sid} is busy: steered at its next safe boundary"
                                " (or kept in its backlog)", title="Steer")
        except ClawError as exc:
            self.notify(str(exc), severity="error", timeout=10)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("stop_session", "spawn"):
            row = next((r for r in self.rows if r["id"] == self.selected), None)
            return row is not None and row.get("status") in OPEN
        if action in ("memory", "history"):
            return self.selected is not None
        if action in ("trace", "explain"):
            return super().check_action(action, parameters)  # `w` says why it cannot
        if action in ("approve_call", "reject_call"):
            return self._waiting_call() is not None  # shown only while a call waits
        return True

    # -- drawing

    def _render_detail(self) -> None:
        if not self.is_mounted:
            return
        self.refresh_bindings()
        s = self.detail
        pal = Palette(self.app)
        if s is None:
            text = ("Select a session." if self.rows else "Loading…" if not self.rows_read()
                    else "No sessions yet. Create one with `clawtower session new --agent NAME`,"
                    " or run `clawtower demo`.")
            self._set("head", Text(text, style=pal.tone("idle")))
            for key, _ in self.SECTIONS[1:]:
                self._set(key, None)
            return
        self._set("head", head_renderable(pal, s))
        last = next((j for j in reversed(s.get("jobs") or []) if j.get("recalled")), None)
        self._set("recalled", recalled_line(pal, last) if last else None,
                  "Recalled · m: memory")
        msgs = s.get("messages") or []
        self._set("transcript", transcript_renderable(
            pal, msgs[-TRANSCRIPT_SHOWN:], s.get("approvals") or [], s.get("drafts") or []),
            f"Transcript · {len(msgs)} message(s)")
        self._draw_stream(self._stream())
        anns = s.get("announces") or []
        self._set("announces", announces_table(pal, anns) if anns else None,
                  f"Announces · {len(anns)}")
        waiting = [b for b in s.get("backlog") or [] if b["status"] == "waiting"]
        pending = [p for p in s.get("pending") or [] if p["status"] == "pending"]
        self._set("backlog", backlog_renderable(pal, waiting, pending)
                  if waiting or pending else None,
                  f"Backlog · {len(waiting)} waiting · {len(pending)} pending")
        runs = s.get("acp") or []
        self._set("acp", acp_renderable(pal, runs) if runs else None,
                  f"Harness · {runs[-1]['run']['harness']} · {runs[-1]['run']['status']}"
                  if runs else "Harness")


__all__ = ["SessionList", "SessionsScreen", "flatten", "session_status", "touched"]
