"""Mode 4's memory panel (`m` on a session): what each turn of the session recalled, and the
memories its agent may read (its `agent:<spec>` namespace and those its policy names). The
operator corrects (`e`) or forgets (`f`) one: each is a typed core command
(`Memories.correct` / `Memories.forget`, the CLI's API), one event naming the operator and
their reason. `t` steps through the turns: the list marks what the chosen turn recalled.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from functools import partial
from typing import Any, ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual import work
from textual.binding import Binding, BindingType

from clawtower.core import ClawError
from clawtower.core.agents.config import load_config
from clawtower.core.describe import one_line
from clawtower.core.memory.policy import recall_namespaces
from clawtower.core.memory.service import Memories, memories_for
from clawtower.core.sessions.service import Sessions
from clawtower.core.textsafe import safe, safe_line

from ..columns import Column
from ..commands import mode_help
from ..modals import ConfirmScreen, MemoryEditScreen, ReasonScreen
from ..model import Delta, fmt_datetime, fmt_time
from ..render import Palette, kv_table
from ..rowlist import Cell
from ..views import ItemList
from .base import ListDetailScreen, explained

TURNS_SHOWN = 8  # newest turns listed in the Recalled section


class MemoryList(ItemList):
    """An agent's memories; a score where the chosen turn recalled one."""

    columns: ClassVar[Sequence[Column]] = (
        Column("Namespace", fit=16, min_width=8, hide_below=56),
        Column("Key", fit=18, min_width=8), Column("Recalled", width=8, justify="right"),
        Column("Content", ratio=1, min_width=10),
    )
    empty_text = "no memories yet — `clawtower memory put` or the agent's memory_store"

    def row_cells(self, key: Hashable, data: Any) -> Sequence[Cell]:
        score = data.get("recalled")
        text = one_line(str(data["content"]))
        return [
            (str(data["namespace"]), "dim"),
            (str(data["key"]), "key"),
            (f"{score:.3g}" if score is not None else "", "active"),
            (f"(expired) {text}", "dim") if data.get("expired") else text,
        ]

    def row_search_text(self, key: Hashable, data: Any) -> str:
        return f"{data['namespace']} {data['key']} {data['category']} {data['content']}"

    def row_sort_key(self, key: Hashable, data: Any) -> Any:
        return (str(data["namespace"]), str(data["key"]))

    @staticmethod
    def version(item: dict[str, Any]) -> Hashable:
        return (item.get("updated_at"), item.get("recalled"), item.get("expired"))


class SessionMemoryScreen(ListDetailScreen):
    """One session's memory panel, pushed over mode 4 (`esc` or `m` goes back)."""

    HELP = mode_help(
        "**Memory** of the session's agent: its memories (the namespaces its policy lets "
        "it read) and what each turn recalled (`t` picks the turn; the list shows the "
        "scores). `e` corrects the selected memory, `f` forgets it: both ask why and are "
        "recorded with your name. `esc` goes back.", ())
    MODE = "sessions"
    PREFIX = "mem"
    LIST_TITLE = "Memories"
    SECTIONS: ClassVar[list[tuple[str, str]]] = [
        ("head", ""), ("recalled", "Recalled"), ("memory", "Memory"),
    ]
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "escape", "Back", id="memory.back", tooltip="Back to the session"),
        Binding("m", "back", "Back", show=False, id="memory.close"),
        Binding("e", "correct", "Correct", id="memory.correct",
                tooltip="Correct the selected memory's content (asks why)"),
        explained("e", "correct"),
        Binding("f", "forget", "Forget", id="memory.forget",
                tooltip="Forget the selected memory (asks why, then to confirm)"),
        explained("f", "forget"),
        Binding("t", "next_turn", "Turn", id="memory.turn",
                tooltip="Show what the next older turn recalled (wraps to the newest)"),
        explained("t", "next_turn"),
    ]

    def __init__(self, session_id: str) -> None:
        super().__init__()
        self.session_id = session_id
        self.session: dict[str, Any] | None = None
        self.namespaces: list[str] = []
        self.memories: list[dict[str, Any]] = []
        self.turn = 0  # index into turns(), newest first
        self.first_read = False  # its rows come from its own read of the store

    def rows_read(self) -> bool:
        return super().rows_read() and self.first_read  # its own read of the store too

    # -- data

    def make_list(self) -> ItemList:
        return MemoryList()

    def items(self) -> list[dict[str, Any]]:
        return self.memories

    def turns(self) -> list[dict[str, Any]]:
        """The session's turns that started, newest first (each with what it recalled)."""
        jobs = (self.session or {}).get("jobs") or []
        return [j for j in reversed(jobs) if j.get("turn_id")]

    def chosen_turn(self) -> dict[str, Any] | None:
        turns = self.turns()
        return turns[self.turn] if 0 <= self.turn < len(turns) else None

    def changes(self, delta: Delta) -> tuple[bool, set[str]]:
        ids: set[str] = set()
        for e in delta.events:
            if e.type.startswith("memory."):
                ids.add(e.entity_id)
            elif e.type.startswith(("turnjob.", "agentspec.")) and getattr(
                    e.payload, "session_id", self.session_id) == self.session_id:
                ids.add("*")
            elif e.type == "session.created" and e.entity_id == self.session_id:
                ids.add("*")  # a job claimed in the session's creation starts there (issue 36)
        return bool(ids), ids

    def sync(self) -> None:
        self._update_bar()
        self.refresh_panel()

    def apply(self, delta: Delta) -> None:
        changed, _ = self.changes(delta)
        if changed:
            self.refresh_panel()
        self._update_bar()

    @work(exclusive=True, group="memory-panel")
    async def refresh_panel(self) -> None:
        """Re-read the session (its turns' recalls), its spec and the agent's memories."""
        store = self.capp.store
        if store is None:
            return
        try:
            sessions = Sessions(store)
            session = await sessions.get(self.session_id)
            spec = await sessions.spec(session["agent_id"])
            allow = spec.config.policy.memory
            recall = recall_namespaces(spec.config.context_policy.recall, allow, spec.name)
            self.namespaces, rows = await Memories(store).of_agent(spec.name, allow, recall)
        except ClawError as exc:
            self.notify(str(exc), severity="error")
            return
        if self._tearing_down():
            return
        self.session = session
        self.turn = min(self.turn, max(len(self.turns()) - 1, 0))
        self.memories = self._mark(rows)
        self.first_read = True
        self._list()
        self.reload()

    def _mark(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        turn = self.chosen_turn()
        scores = {(r["namespace"], r["key"]): r["score"]
                  for r in (turn or {}).get("recalled") or []}
        return [{**r, "id": f"{r['namespace']}/{r['key']}",
                 "recalled": scores.get((r["namespace"], r["key"]))} for r in rows]

    async def fetch(self, key: str) -> dict[str, Any] | None:
        assert self.capp.store is not None
        namespace, _, name = key.partition("/")
        return await Memories(self.capp.store).get(namespace, name)

    # -- actions

    def unavailable(self, action: str) -> str | None:
        if action in ("correct", "forget"):
            if self.detail is None or self.selected is None:
                return "no memory selected"
            if self.detail.get("forgotten"):
                return f"{self.selected}: already forgotten"
        if action == "next_turn" and len(self.turns()) < 2:
            return "this session has no other turn"
        return None

    def action_back(self) -> None:
        self.app.pop_screen()

    def back(self) -> None:  # esc with no filter to clear
        self.app.pop_screen()

    def action_next_turn(self) -> None:
        turns = self.turns()
        if not turns:
            return
        self.turn = (self.turn + 1) % len(turns)
        self.memories = self._mark(self.memories)
        self._list()
        self._render_detail()

    def action_correct(self) -> None:
        m = self.detail
        if m is None:
            return
        ns, key = str(m["namespace"]), str(m["key"])

        def done(answer: tuple[str, str] | None) -> None:
            if answer is not None:
                self._write("correct", ns, key, *answer)

        self.app.push_screen(MemoryEditScreen(
            f"Correct {ns} {key} (as {self.capp.operator})", str(m["content"])), done)

    def action_forget(self) -> None:
        m = self.detail
        if m is None:
            return
        ns, key = str(m["namespace"]), str(m["key"])
        operator = self.capp.operator

        def confirmed(reason: str, ok: bool | None) -> None:
            if ok:
                self._write("forget", ns, key, "", reason)

        def got_reason(reason: str | None) -> None:
            if reason:
                self.app.push_screen(ConfirmScreen(
                    f"Forget {ns} {key}?",
                    f"{one_line(str(m['content']), 300)}\n\nReason: {reason}\n\nBy"
                    f" {operator}. It is no longer recalled; its history stays in the log.",
                    yes="Forget", destructive=True), partial(confirmed, reason))

        self.app.push_screen(ReasonScreen(f"Forget {ns} {key}: why?",
                                          one_line(str(m["content"]), 300),
                                          placeholder="reason (recorded with your name)"),
                             got_reason)

    @work(group="memory-write")
    async def _write(self, verb: str, ns: str, key: str, content: str, reason: str) -> None:
        store = self.capp.store
        if store is None:
            return
        by = self.capp.operator
        try:  # with the project's embedder, so a correction keeps the memory's vector
            mem = memories_for(store, load_config())
            if verb == "correct":
                out = await mem.correct(ns, key, content, by=by, reason=reason)
                said = f"{ns} {key}: {out['status']} by {by}"
            else:
                await mem.forget(ns, key, by=by, reason=reason)
                said = f"{ns} {key}: forgotten by {by}"
        except ClawError as exc:
            self.notify(str(exc), title=f"Not {verb}ed" if verb == "correct" else
                        "Not forgotten", severity="error")
            return
        self.notify(said, title="Memory")

    # -- drawing

    def _render_detail(self) -> None:
        if not self.is_mounted:
            return
        self.refresh_bindings()
        pal = Palette(self.app)
        s = self.session
        if s is None:
            self._set("head", Text("loading…", style=pal.tone("idle")))
            return
        head = Text()
        head.append(f"{s['id']}  ", style=pal("accent", "bold"))
        head.append(f"agent {s['agent']}", style="bold")
        head.append(f" · reads {', '.join(self.namespaces) or 'nothing'}",
                    style=pal.tone("idle"))
        self._set("head", head)
        turns = self.turns()
        self._set("recalled", recalled_renderable(pal, turns[:TURNS_SHOWN], self.turn)
                  if turns else Text("no turn yet", style=pal.tone("idle")),
                  f"Recalled · turn {self.turn + 1} of {len(turns)} (t: next)"
                  if len(turns) > 1 else "Recalled")
        m = self.detail
        self._set("memory", memory_renderable(pal, m) if m is not None else None,
                  f"Memory · {m['namespace']} {m['key']}" if m is not None else None)


def recalled_renderable(pal: Palette, turns: list[dict[str, Any]], chosen: int
                        ) -> RenderableType:
    """One line per turn, newest first: when it started and what it recalled (scores)."""
    rows: list[RenderableType] = []
    for i, j in enumerate(turns):
        line = Text("▸ " if i == chosen else "  ", style=pal.tone("active", "bold"))
        line.append(f"{fmt_time(j.get('started_at'))} {j['turn_id']}  ",
                    style=pal.tone("idle"))
        refs = j.get("recalled") or []
        line.append(", ".join(f"{r['namespace']} {r['key']} ({r['score']:.3g})"
                              for r in refs) if refs else "nothing recalled",
                    style="bold" if i == chosen and refs else "")
        rows.append(line)
    return Group(*rows)


def memory_renderable(pal: Palette, m: dict[str, Any]) -> RenderableType:
    source = " ".join(x for x in (m["source_session"], m["source_turn"]) if x) or "-"
    rows: list[tuple[str, Any]] = [
        ("category", safe_line(m["category"] or "-")),
        ("updated", f"{fmt_datetime(m['updated_at'])} by {safe_line(m['updated_by'])}"
                    f" (created by {safe_line(m['created_by'])})"),
        ("why", safe_line(m["reason"] or "-")), ("source", safe_line(source)),
    ]
    if m.get("expires_at") is not None:
        rows.append(("expires", Text(fmt_datetime(m["expires_at"]) + (
            " (expired: not recalled)" if m.get("expired") else ""),
            style=pal.tone("failed") if m.get("expired") else "")))
    if m.get("forgotten"):
        rows.append(("forgotten", Text(safe_line(m["forgotten_reason"]),
                                       style=pal.tone("failed"))))
    return Group(kv_table(pal, rows), Text(""), Text(safe(str(m["content"]))))


__all__ = ["MemoryList", "SessionMemoryScreen"]
