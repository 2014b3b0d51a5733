"""The console's screens: one per mode, plus the task drill-down."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, ClassVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from core import ClawError, Tasks
from core.agents.usage import UsageTotals, format_usage
from core.describe import one_line

from .meetingdata import get_meeting, reply_state, rounds_of
from .model import PHASE_TONE, Delta, fmt_datetime, fmt_time
from .rowlist import RowList
from .views import (
    ApprovalList,
    EventLog,
    ItemList,
    MeetingList,
    ModeBar,
    TaskList,
    meeting_outcome,
    meeting_tone,
    phase_label,
)

if TYPE_CHECKING:
    from .app import ClawtowerApp



def show_section(section: Static, renderable: RenderableType | None, title: str | None) -> None:
    """Fill a detail section, or hide it when there is nothing to show."""
    if renderable is None:
        section.display = False
        return
    if title is not None:
        section.border_title = title
    section.update(renderable)
    section.display = True

class FilterBar(Input):
    """The `/` filter input: narrows the list that had focus; esc clears it."""

    def __init__(self) -> None:
        super().__init__(placeholder="filter (enter keeps it, esc clears)", id="filter-bar",
                         disabled=True)  # hidden and out of the focus chain until `/`
        self.target: RowList | None = None


class ConsoleScreen(Screen[None]):
    """A screen fed with the store's changes by the app."""

    MODE: ClassVar[str] = "tasks"
    AUTO_FOCUS = None  # each screen focuses its main widget itself

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "filter", "Filter", id="filter",
                tooltip="Filter the focused list (esc clears)"),
        Binding("escape", "escape", "Back/clear", show=False, id="escape"),
    ]

    @property
    def capp(self) -> ClawtowerApp:
        return self.app  # type: ignore[return-value]

    def on_mount(self) -> None:
        self.capp.add_view(self)
        self.sync()

    def on_unmount(self) -> None:
        self.capp.remove_view(self)

    def sync(self) -> None:
        """Show the model as it is now."""
        self._update_bar()

    def model_changed(self, delta: Delta) -> None:
        if delta.full:
            self.sync()
        else:
            self.apply(delta)

    def apply(self, delta: Delta) -> None:
        self._update_bar()

    def _update_bar(self) -> None:
        for bar in self.query(ModeBar):
            bar.update_bar()

    # ------------------------------------------------------------------ filter

    def action_filter(self) -> None:
        focused = self.focused
        target = focused if isinstance(focused, RowList) else None
        if target is None:
            lists = list(self.query(RowList))
            target = lists[0] if lists else None
        if target is None:
            return
        bar = self.query_one(FilterBar)
        bar.target = target
        bar.value = target.filter_text
        bar.disabled = False
        bar.display = True
        bar.focus()

    @on(Input.Changed, "#filter-bar")
    def _filter_changed(self, event: Input.Changed) -> None:
        bar = self.query_one(FilterBar)
        if bar.target is not None:
            bar.target.set_filter(event.value)
            self._filter_subtitle(bar.target)

    @on(Input.Submitted, "#filter-bar")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self._close_filter(clear=False)

    def _close_filter(self, *, clear: bool) -> None:
        bar = self.query_one(FilterBar)
        target = bar.target
        bar.display = False
        bar.disabled = True
        if target is not None:
            if clear:
                target.set_filter("")
                self._filter_subtitle(target)
            target.focus()

    def _filter_subtitle(self, target: RowList) -> None:
        if target.filter_text:
            target.border_subtitle = (f"filter '{target.filter_text}': {target.visible_count} of "
                                      f"{len(target)} · esc clears")
        else:
            target.border_subtitle = ""

    def action_escape(self) -> None:
        bar = self.query_one(FilterBar)
        if bar.display:
            self._close_filter(clear=True)
            return
        focused = self.focused
        if isinstance(focused, RowList) and focused.filter_text:
            focused.set_filter("")
            self._filter_subtitle(focused)
            return
        self.back()

    def back(self) -> None:
        """What esc does when there is no filter to clear."""

    def compose_bottom(self) -> ComposeResult:
        yield FilterBar()
        yield Footer()


class TasksScreen(ConsoleScreen):
    """Mode 1: every task by phase, live; enter drills in."""

    MODE = "tasks"

    def compose(self) -> ComposeResult:
        yield ModeBar(self.MODE)
        with Vertical(id="body"):
            tasks = TaskList(id="tasks")
            tasks.border_title = "Tasks"
            yield tasks
            log = EventLog(id="events")
            log.border_title = "Events"
            yield log
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(TaskList).focus()

    def sync(self) -> None:
        m = self.capp.model
        self.query_one(TaskList).load(m.tasks.values())
        self.query_one(EventLog).load(m.events)
        self._titles()
        super().sync()

    def apply(self, delta: Delta) -> None:
        if delta.tasks:
            self.query_one(TaskList).apply(delta.tasks)
        if delta.events:
            self.query_one(EventLog).load(self.capp.model.events)
        self._titles()
        super().apply(delta)

    def _titles(self) -> None:
        m = self.capp.model
        waiting = m.counts.get("awaiting_approval", 0) + m.counts.get("circuit_open", 0)
        extra = f" · {waiting} waiting on you" if waiting else ""
        self.query_one(TaskList).border_title = f"Tasks · {len(m.tasks)}{extra}"
        tl = self.query_one(TaskList)
        self._filter_subtitle(tl)

    @on(RowList.Selected, "#tasks")
    def _open(self, event: RowList.Selected) -> None:
        self.capp.open_task(str(event.key))

    @on(RowList.Selected, "#events")
    def _open_event_subject(self, event: RowList.Selected) -> None:
        row = self.query_one(EventLog).get(event.key)
        if row is not None and row.entity == "task":
            self.capp.open_task(row.entity_id)


class ApprovalsScreen(ConsoleScreen):
    """Mode 2: pending decisions with their context; `a` approves, `r` rejects."""

    MODE = "approvals"

    def compose(self) -> ComposeResult:
        yield ModeBar(self.MODE)
        with Vertical(id="body"):
            with Horizontal(id="approvals-pane"):
                approvals = ApprovalList(id="approvals")
                approvals.border_title = "Pending approvals"
                yield approvals
                with VerticalScroll(id="approval-detail") as scroll:
                    scroll.border_title = "Details"
                    yield Static(id="approval-body")
            log = EventLog(id="events")
            log.border_title = "Events"
            yield log
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(ApprovalList).focus()

    def sync(self) -> None:
        self.query_one(EventLog).load(self.capp.model.events)
        self._approvals()
        super().sync()

    def apply(self, delta: Delta) -> None:
        if delta.approvals_changed:
            self._approvals()
        if delta.events:
            self.query_one(EventLog).load(self.capp.model.events)
        super().apply(delta)

    def _approvals(self) -> None:
        lst = self.query_one(ApprovalList)
        lst.load(self.capp.model.approvals)
        lst.border_title = f"Pending approvals · {len(self.capp.model.approvals)}"
        self._filter_subtitle(lst)
        self._show(lst.cursor_key)

    @on(RowList.Highlighted, "#approvals")
    def _highlighted(self, event: RowList.Highlighted) -> None:
        self._show(event.key)

    @on(RowList.Selected, "#approvals")
    def _selected(self, event: RowList.Selected) -> None:
        a = self.capp.model.approval(str(event.key))
        if a is not None and a["subject"] in self.capp.model.tasks:
            self.capp.open_task(a["subject"])

    def _show(self, key: Any) -> None:
        body = self.query_one("#approval-body", Static)
        a = self.capp.model.approval(str(key)) if key is not None else None
        if a is None:
            body.update(Text("Select a pending item to see what it would do.", style="dim"))
            return
        body.update(approval_renderable(self.capp, a, keys=True))

    def action_approve(self) -> None:
        key = self.query_one(ApprovalList).cursor_key
        if key is not None:
            self.capp.request_approve(str(key))

    def action_reject(self) -> None:
        key = self.query_one(ApprovalList).cursor_key
        if key is not None:
            self.capp.request_reject(str(key))


class PlaceholderScreen(ConsoleScreen):
    """Modes whose features arrive with later issues: say so, show nothing made up."""

    TEXT: ClassVar[str] = ""

    def compose(self) -> ComposeResult:
        yield ModeBar(self.MODE)
        with Vertical(id="body"):
            yield Static(self.TEXT, id="placeholder")
        yield from self.compose_bottom()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return action != "filter"


class ListDetailScreen(ConsoleScreen):
    """A live list on the left and the selected item's detail on the right, in titled
    sections that hide when empty; the detail is re-read from the store when its item
    changes. Subclasses say which list, which sections, and how to read and draw an item."""

    SECTIONS: ClassVar[list[tuple[str, str]]] = []
    PREFIX: ClassVar[str] = ""  # section ids: f"{PREFIX}-{key}"; pane/detail ids from it too
    LIST_TITLE: ClassVar[str] = ""

    def __init__(self) -> None:
        super().__init__()
        self.selected: str | None = None
        self.detail: dict[str, Any] | None = None

    # -- what a subclass provides

    def make_list(self) -> ItemList:
        raise NotImplementedError

    def items(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def changes(self, delta: Delta) -> tuple[bool, set[str]]:
        """(did the list change, ids of the items that changed)."""
        raise NotImplementedError

    def list_extra(self, items: list[dict[str, Any]]) -> str:
        return ""

    async def fetch(self, key: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def _render_detail(self) -> None:
        raise NotImplementedError

    # -- shared behaviour

    @property
    def item_list(self) -> ItemList:
        return self.query_one(f"#{self.PREFIX}-list", ItemList)

    def compose(self) -> ComposeResult:
        yield ModeBar(self.MODE)
        with Horizontal(id=f"{self.PREFIX}-pane", classes="list-detail"):
            lst = self.make_list()
            lst.id = f"{self.PREFIX}-list"
            lst.border_title = self.LIST_TITLE
            yield lst
            with VerticalScroll(id=f"{self.PREFIX}-detail", classes="detail"):
                for key, title in self.SECTIONS:
                    section = Static(id=f"{self.PREFIX}-{key}", classes="section")
                    section.border_title = title
                    yield section
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self.item_list.focus()
        self.app.theme_changed_signal.subscribe(self, lambda _t: self._render_detail())

    def sync(self) -> None:
        self._list()
        self.reload()
        super().sync()

    def apply(self, delta: Delta) -> None:
        changed, ids = self.changes(delta)
        if changed:
            self._list()
            if self.selected in ids:
                self.reload()
        super().apply(delta)

    def _list(self) -> None:
        lst = self.item_list
        items = self.items()
        lst.load(items)
        lst.border_title = f"{self.LIST_TITLE} · {len(items)}{self.list_extra(items)}"
        self._filter_subtitle(lst)
        self.before_select(lst)
        key = lst.cursor_key
        if key is not None and key != self.selected:
            self.select(str(key))
        elif key is None and self.selected is None:
            self._render_detail()

    def before_select(self, lst: RowList) -> None:
        """A hook to move the cursor (e.g. to an item just started) before selecting."""

    def select(self, key: str) -> None:
        self.selected = key
        self.detail = None
        self.reload()

    def on_row_list_highlighted(self, event: RowList.Highlighted) -> None:
        if event.control is self.item_list and event.key is not None \
                and event.key != self.selected:
            self.select(str(event.key))

    @work(exclusive=True, group="detail")
    async def reload(self) -> None:
        if self.capp.store is None or self.selected is None:
            self._render_detail()
            return
        wanted = self.selected
        try:
            detail = await self.fetch(wanted)
        except ClawError as exc:
            self.notify(str(exc), severity="error")
            return
        if wanted == self.selected:
            self.detail = detail
            self._render_detail()

    def _set(self, key: str, renderable: RenderableType | None, title: str | None = None) -> None:
        show_section(self.query_one(f"#{self.PREFIX}-{key}", Static), renderable, title)


class MeetingsScreen(ListDetailScreen):
    """Mode 3: meetings, newest first; the selected one live, round by round.

    `s` stops the selected meeting (after a y/n), `+` grants it one more round;
    `:meeting a,b,c TOPIC` starts one.
    """

    MODE = "meetings"
    PREFIX = "mtg"
    LIST_TITLE = "Meetings"
    SECTIONS: ClassVar[list[tuple[str, str]]] = [
        ("head", ""), ("current", "Current round"), ("stances", "Stances by round"),
        ("summary", "Rolling summary"), ("tokens", "Tokens per round"),
    ]

    def make_list(self) -> ItemList:
        return MeetingList()

    def items(self) -> list[dict[str, Any]]:
        return self.capp.model.meetings

    def changes(self, delta: Delta) -> tuple[bool, set[str]]:
        return delta.meetings_changed, delta.meetings

    def list_extra(self, items: list[dict[str, Any]]) -> str:
        running = sum(1 for m in items if m.get("status") == "running")
        return f" · {running} running" if running else ""

    def before_select(self, lst: RowList) -> None:
        wanted = self.capp.pending_meeting
        if wanted is not None and wanted in lst:
            self.capp.pending_meeting = None
            lst.move_cursor_to_key(wanted)

    async def fetch(self, key: str) -> dict[str, Any] | None:
        assert self.capp.store is not None
        return await get_meeting(self.capp.store, key)

    def _selected_meeting(self) -> dict[str, Any] | None:
        key = self.item_list.cursor_key
        return self.capp.model.meeting(str(key)) if key is not None else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("stop_meeting", "grant_round"):
            m = self._selected_meeting()
            return m is not None and m.get("status") == "running"
        return True

    def action_stop_meeting(self) -> None:
        m = self._selected_meeting()
        if m is not None:
            self.capp.request_stop_meeting(m["id"])

    def action_grant_round(self) -> None:
        m = self._selected_meeting()
        if m is not None:
            self.capp.grant_rounds(m["id"], 1)

    def _render_detail(self) -> None:
        if not self.is_mounted:
            return
        self.refresh_bindings()
        m = self.detail
        pal = Palette(self.capp)
        if m is None:
            text = ("Select a meeting to watch it." if self.capp.model.meetings else
                    "No meetings yet. Start one from the palette (ctrl+p) or with\n"
                    ":meeting ada,ben,cyd Should we ship on Friday?")
            self._set("head", Text(text, style=pal.tone("idle")))
            for key, _ in self.SECTIONS[1:]:
                self._set(key, None)
            return
        rounds = rounds_of(m)
        self._set("head", meeting_head_renderable(pal, m))
        current = rounds[-1] if rounds else None
        running = m.get("status") == "running"
        if current is not None:
            state = "in progress" if running and current.get("consensus") is None else (
                str(current.get("consensus") or ""))
            self._set("current", current_round_renderable(pal, m, current),
                      f"Round {current['round']} of {m.get('max_rounds')} · {state}")
        else:
            self._set("current", Text("waiting for round 1", style=pal.tone("idle")),
                      "Current round")
        self._set("stances", stance_table(pal, m) if rounds else None)
        summary = str(m.get("summary") or "")
        self._set("summary", Text(summary) if summary else None)
        usage = m.get("usage")
        self._set("tokens", tokens_table(pal, rounds) if rounds else None,
                  f"Tokens per round · {usage_line(usage)}" if rounds and usage else None)


class SessionsScreen(PlaceholderScreen):
    MODE = "sessions"
    TEXT = ("Sessions — transcripts, subagents and steering — arrive with a later issue.\n\n"
            "Press 1 for tasks or 2 for approvals.")


# ---------------------------------------------------------------------------- drill-down


class TaskDetailScreen(ConsoleScreen):
    """Everything the store knows about one task, refreshed as it changes."""

    MODE = "tasks"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "escape", "Back", id="detail.back"),
        Binding("a", "approve", "Approve", id="detail.approve",
                tooltip="Approve this task's pending approval"),
        Binding("r", "reject", "Reject", id="detail.reject",
                tooltip="Reject this task's pending approval"),
        Binding("up,k", "scroll('up')", "Up", show=False, id="detail.up"),
        Binding("down,j", "scroll('down')", "Down", show=False, id="detail.down"),
    ]

    SECTIONS: ClassVar[list[tuple[str, str]]] = [
        ("summary", ""), ("pending", "Waiting on you"), ("circuit", "Circuit open"),
        ("spec", "Spec"), ("history", "History"), ("reviews", "Reviews"),
        ("attempts", "Attempts"), ("evidence", "Evidence"), ("approvals", "Approvals"),
        ("usage", "Agent usage"), ("refusals", "Refused actions"),
    ]

    def __init__(self, task_id: str) -> None:
        super().__init__()
        self.task_id = task_id
        self.detail: dict[str, Any] | None = None

    def compose(self) -> ComposeResult:
        yield ModeBar(self.MODE)
        with VerticalScroll(id="detail"):
            for key, title in self.SECTIONS:
                section = Static(id=f"sec-{key}", classes="section")
                section.border_title = title
                section.display = False
                yield section
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#detail").focus()
        self.app.theme_changed_signal.subscribe(self, lambda _t: self._render_detail())

    def sync(self) -> None:
        self.reload()
        super().sync()

    def apply(self, delta: Delta) -> None:
        if any(t["id"] == self.task_id for t in delta.tasks) or (
                delta.approvals_changed and self.detail is not None):
            self.reload()
        super().apply(delta)

    @work(exclusive=True, group="detail")
    async def reload(self) -> None:
        store = self.capp.store
        if store is None:
            return
        try:
            self.detail = await Tasks(store).get(self.task_id)
        except ClawError as exc:
            self.notify(str(exc), severity="error")
            return
        self._render_detail()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "filter":
            return False
        if action in ("approve", "reject"):
            return self._pending() is not None
        return True

    def action_escape(self) -> None:
        self.back()

    def back(self) -> None:
        self.dismiss()

    def action_scroll(self, direction: str) -> None:
        scroll = self.query_one("#detail", VerticalScroll)
        if direction == "up":
            scroll.scroll_up()
        else:
            scroll.scroll_down()

    def _pending(self) -> dict[str, Any] | None:
        return self.capp.model.pending_for(self.task_id)

    def action_approve(self) -> None:
        a = self._pending()
        if a is None:
            self.notify(f"{self.task_id}: nothing waits for approval", severity="warning")
        else:
            self.capp.request_approve(a["id"])

    def action_reject(self) -> None:
        a = self._pending()
        if a is None:
            self.notify(f"{self.task_id}: nothing waits for approval", severity="warning")
        else:
            self.capp.request_reject(a["id"])

    def _set(self, key: str, renderable: RenderableType | None, title: str | None = None) -> None:
        show_section(self.query_one(f"#sec-{key}", Static), renderable, title)

    def _render_detail(self) -> None:
        t = self.detail
        if t is None or not self.is_mounted:
            return
        pal = Palette(self.capp)
        self.refresh_bindings()
        self._set("summary", summary_renderable(pal, t))
        pending = self._pending()
        self._set("pending", approval_renderable(self.capp, pending, keys=True)
                  if pending else None,
                  f"Waiting on you · approval {pending['id']}" if pending else None)
        self._set("circuit", circuit_renderable(pal, t["circuit"]) if t.get("circuit") else None)
        self._set("spec", spec_renderable(pal, t))
        self._set("history", history_renderable(pal, t["history"]),
                  f"History · {len(t['history'])} transitions")
        self._set("reviews", reviews_renderable(pal, t["reviews"]) if t["reviews"] else None,
                  f"Reviews · {len(t['reviews'])}")
        self._set("attempts", attempts_renderable(pal, t) if t["attempt_records"] else None,
                  f"Attempts · {len(t['attempt_records'])}")
        has_evidence = t["artifacts"] or t["side_effects"]
        self._set("evidence", evidence_renderable(pal, t) if has_evidence else None)
        self._set("approvals", approvals_table(pal, t["approvals"]) if t["approvals"] else None)
        self._set("usage", usage_renderable(pal, t["usage"]) if t["usage"] else None,
                  f"Agent usage · {usage_line(t['usage'])}" if t["usage"] else None)
        self._set("refusals", refusals_renderable(pal, t["refusals"]) if t["refusals"] else None)


# ---------------------------------------------------------------------------- renderers


class Palette:
    """Rich styles taken from the active theme's variables (re-read on every render)."""

    def __init__(self, app: ClawtowerApp) -> None:
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


def _table(pal: Palette, *columns: str | tuple[str, dict[str, Any]]) -> Table:
    table = Table(box=None, expand=True, pad_edge=False, show_edge=False,
                  header_style=pal.tone("idle", "bold"), padding=(0, 1))
    for col in columns:
        name, kw = (col, {}) if isinstance(col, str) else col
        table.add_column(name, **kw)
    return table


def _kv(pal: Palette, rows: list[tuple[str, Any]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style=pal.tone("idle"), no_wrap=True)
    table.add_column(ratio=1)
    for k, v in rows:
        table.add_row(k, v if isinstance(v, Text) else Text(str(v)))
    return table


def summary_renderable(pal: Palette, t: dict[str, Any]) -> RenderableType:
    head = Text()
    head.append(f"{t['id']}  ", style=pal("accent", "bold"))
    head.append(t["title"], style="bold")
    head.append("   ")
    head.append(f" {phase_label(t['phase']).upper()} ", style=pal.phase(t["phase"], "bold reverse"))
    spec_state = "spec ok" if t["spec_ok"] else "spec incomplete"
    meta = Text(
        f"attempts {t['attempts']} · spec v{t['spec_version']} ({spec_state}) · created "
        f"{fmt_datetime(t['created_at'])} · updated {fmt_datetime(t['updated_at'])}",
        style=pal.tone("idle"))
    rows: list[RenderableType] = [head, meta]
    if t.get("source"):
        rows.append(Text(f"source {t['source']}", style=pal.tone("idle")))
    if t["phase_reason"]:
        why = Text("why: ", style=pal.tone("idle"))
        why.append(t["phase_reason"], style=pal.phase(t["phase"]))
        rows.append(why)
    return Group(*rows)


def spec_renderable(pal: Palette, t: dict[str, Any]) -> RenderableType:
    spec = t["spec"]
    rows: list[tuple[str, Any]] = [("goal", spec.get("goal", ""))]

    def bullets(items: list[Any]) -> Text:
        return Text("\n".join(f"• {one_line(i, 300)}" for i in items))

    for field, label in (("acceptance_criteria", "acceptance"), ("scope_in", "in scope"),
                         ("scope_out", "out of scope"), ("inputs", "inputs"),
                         ("outputs", "outputs"), ("risks", "risks")):
        if spec.get(field):
            rows.append((label, bullets(spec[field])))
    if spec.get("side_effects"):
        rows.append(("side effects", bullets(
            [f"{e['kind']}: {e['description']}" + (f" → {e['target']}" if e.get("target") else "")
             for e in spec["side_effects"]])))
    if spec.get("labels"):
        rows.append(("labels", ", ".join(spec["labels"])))
    problems = t.get("spec_problems") or []
    if problems:
        rows.append(("problems", Text("\n".join(f"• {p}" for p in problems),
                                      style=pal.tone("waiting"))))
    return _kv(pal, rows)


def circuit_renderable(pal: Palette, c: dict[str, Any]) -> RenderableType:
    options = Text()
    for i, opt in enumerate(c.get("unblock_options") or []):
        if i:
            options.append("\n")
        phase, _, what = str(opt).partition(":")
        options.append(f"→ {phase}", style=pal.phase(phase.strip(), "bold"))
        options.append(f":{what}" if what else "")
    rows: list[tuple[str, Any]] = [
        ("failure", Text(str(c.get("failure_summary", "")), style=pal.tone("failed"))),
        ("attempts", c.get("attempts", "")),
        ("last good", c.get("last_good_artifact") or "none"),
        ("unblock", options),
    ]
    return _kv(pal, rows)


def history_renderable(pal: Palette, history: list[dict[str, Any]]) -> RenderableType:
    table = _table(pal, ("Time", {"no_wrap": True}), ("Seq", {"justify": "right"}),
                   ("From", {"no_wrap": True}), ("To", {"no_wrap": True}), "Att",
                   ("By", {"no_wrap": True}), ("Reason", {"ratio": 1}))
    for h in history:
        table.add_row(
            Text(fmt_time(h["at"]), style=pal.tone("idle")),
            Text(str(h["seq"]), style=pal.tone("idle")),
            Text(phase_label(h["from_phase"]), style=pal.phase(h["from_phase"])),
            Text(phase_label(h["to_phase"]), style=pal.phase(h["to_phase"], "bold")),
            str(h["attempt"] or ""), h["actor"], h["reason"])
    return table


def _verdict_style(pal: Palette, verdict: str) -> str:
    if verdict in ("approved", "approve"):
        return pal.tone("done", "bold")
    if verdict in ("blocked", "rejected"):
        return pal.tone("failed", "bold")
    return pal.tone("waiting", "bold")


def reviews_renderable(pal: Palette, reviews: list[dict[str, Any]]) -> RenderableType:
    table = _table(pal, ("Time", {"no_wrap": True}), ("Stage", {"no_wrap": True}), "Att",
                   ("Reviewer", {"no_wrap": True}), ("Verdict", {"no_wrap": True}),
                   ("Findings", {"ratio": 1}))
    for r in reviews:
        findings = Text()
        for i, f in enumerate(r.get("findings") or []):
            if i:
                findings.append("\n")
            if isinstance(f, dict):
                if f.get("ref"):
                    findings.append(f"{f['ref']}: ", style=pal("accent"))
                findings.append(str(f.get("text", "")))
            else:
                findings.append(str(f))
        details = r.get("details") or {}
        if details:
            if findings:
                findings.append("\n")
            findings.append(one_line(", ".join(f"{k}: {v}" for k, v in details.items()
                                               if v not in (None, "", [])), 300),
                            style=pal.tone("idle"))
        table.add_row(Text(fmt_time(r["at"]), style=pal.tone("idle")), r["stage"],
                      str(r["attempt"] or ""), r["reviewer"],
                      Text(r["verdict"], style=_verdict_style(pal, r["verdict"])), findings)
    return table


def attempts_renderable(pal: Palette, t: dict[str, Any]) -> RenderableType:
    table = _table(pal, ("#", {"justify": "right"}), ("Model", {"no_wrap": True}),
                   ("Status", {"no_wrap": True}), ("Started", {"no_wrap": True}),
                   ("Finished", {"no_wrap": True}), ("Beats", {"justify": "right"}),
                   ("Checkpoint", {"no_wrap": True}), ("Reason / output", {"ratio": 1}))
    for a in t["attempt_records"]:
        status = a["status"]
        tone = "done" if status == "succeeded" else "failed" if status in (
            "failed", "abandoned") else "active"
        model = a["model"] + (" ↑" if a.get("escalated") else "")
        cp = a.get("checkpoint")
        out = a.get("output") or {}
        why = a["reason"] or (out.get("summary", "") if isinstance(out, dict) else "")
        table.add_row(str(a["n"]), model, Text(status, style=pal.tone(tone, "bold")),
                      fmt_time(a["started_at"]), fmt_time(a.get("finished_at")),
                      str(a["heartbeats"]),
                      json.dumps(cp, sort_keys=True) if cp else "", one_line(why, 300))
    retries = t.get("retries") or []
    if not retries:
        return table
    rt = _table(pal, ("Time", {"no_wrap": True}), ("After", {"justify": "right"}),
                ("Next", {"justify": "right"}), ("Not before", {"no_wrap": True}),
                ("Escalate", {"no_wrap": True}), ("Reason", {"ratio": 1}))
    for r in retries:
        rt.add_row(fmt_time(r["at"]), str(r["attempt"]), str(r["next_attempt"]),
                   fmt_time(r["not_before"]), "yes" if r["escalate"] else "",
                   r["reason"])
    return Group(table, Text(""), Text("Retries", style="bold"), rt)


def evidence_renderable(pal: Palette, t: dict[str, Any]) -> RenderableType:
    parts: list[RenderableType] = []
    if t["artifacts"]:
        table = _table(pal, ("Att", {"justify": "right"}), ("Artifact", {"no_wrap": True}),
                       ("URI", {"ratio": 1}), ("Summary", {"ratio": 1}))
        for a in t["artifacts"]:
            table.add_row(str(a["attempt"]), a["name"], Text(a["uri"], style=pal("accent")),
                          a["summary"])
        parts += [Text("Artifacts", style="bold"), table]
    if t["side_effects"]:
        table = _table(pal, ("Effect", {"no_wrap": True}), ("Kind", {"no_wrap": True}),
                       ("Status", {"no_wrap": True}), ("Target", {"ratio": 1}),
                       ("Description", {"ratio": 2}), ("Result", {"ratio": 1}))
        for e in t["side_effects"]:
            tone = "done" if e["status"] == "done" else "waiting"
            table.add_row(e["effect_id"], e["kind"], Text(e["status"], style=pal.tone(tone)),
                          e["target"], e["description"], e["result"])
        if parts:
            parts.append(Text(""))
        parts += [Text("Side effects", style="bold"), table]
    return Group(*parts)


def approvals_table(pal: Palette, approvals: list[dict[str, Any]]) -> RenderableType:
    table = _table(pal, ("ID", {"no_wrap": True}), ("Kind", {"no_wrap": True}),
                   ("Status", {"no_wrap": True}), ("Asked", {"no_wrap": True}),
                   ("Decided by", {"no_wrap": True}), ("Reason", {"ratio": 1}))
    for a in approvals:
        status = a["status"]
        tone = {"approved": "done", "rejected": "failed", "pending": "waiting"}.get(status, "idle")
        table.add_row(a["id"], a["kind"], Text(status, style=pal.tone(tone, "bold")),
                      fmt_time(a["requested_at"]),
                      (a.get("decided_by") or "") + (f" at {fmt_time(a['decided_at'])}"
                                                     if a.get("decided_at") else ""),
                      a.get("reason") or "")
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
    table = _table(pal, *cols)
    for u in usage:
        cells = [u["agent"], u["model"], str(u["calls"]), str(u["prompt_tokens"]),
                 str(u["completion_tokens"])]
        if priced:
            cells.append(f"${float(u.get('cost_usd') or 0):.4f}")
        table.add_row(*cells)
    return table


def refusals_renderable(pal: Palette, refusals: list[dict[str, Any]]) -> RenderableType:
    table = _table(pal, "Time", "Actor", "Role", "Action", ("Reason", {"ratio": 1}))
    for r in refusals:
        table.add_row(fmt_time(r["at"]), r["actor"], r["role"], r["action"],
                      Text(r["reason"], style=pal.tone("failed")))
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


def approval_renderable(app: ClawtowerApp, a: dict[str, Any], *, keys: bool) -> RenderableType:
    """What an approval asks, in its own words, with its context and preview."""
    pal = Palette(app)
    head = Text()
    head.append(a["title"], style="bold")
    rows: list[tuple[str, Any]] = [
        ("id", a["id"]), ("kind", a["kind"]), ("subject", a["subject"]),
        ("asked by", f"{a['requested_by']} at {fmt_datetime(a['requested_at'])}"),
    ]
    if a.get("required_approver"):
        rows.append(("approver", f"only {a['required_approver']} may decide"))
    if a.get("require_different"):
        rows.append(("approver", f"someone other than {a['requested_by']}"))
    parts: list[RenderableType] = [head, Text(""), Text(a["prompt"])]
    if a.get("preview"):  # what will happen comes first; the bookkeeping after
        parts += [Text(""), Text("Preview", style="bold"),
                  Text(a["preview"], style=pal("accent"))]
    parts += [Text(""), _kv(pal, rows)]
    ctx = a.get("context") or {}
    if ctx:
        ctx_rows = [(str(k), _context_value(v)) for k, v in ctx.items()]
        parts += [Text(""), Text("Context", style="bold"), _kv(pal, ctx_rows)]
    if keys:
        verbs = GATE_VERBS.get(a["kind"], (" approve   ", " reject (asks a reason)"))
        hint = Text("\n")
        hint.append(" a ", style=pal.tone("done", "bold reverse"))
        hint.append(verbs[0])
        hint.append(" r ", style=pal.tone("failed", "bold reverse"))
        hint.append(verbs[1])
        parts.append(hint)
    return Group(*parts)



# ---------------------------------------------------------------------------- meetings

STANCE_LABEL = {"AGREE": "agree", "DISAGREE": "disagree", "NEUTRAL": "neutral",
                "UNKNOWN": "unknown"}


def stance_style(pal: Palette, stance: str | None, extra: str = "") -> str:
    name = str(stance or "UNKNOWN").lower()
    if name not in ("agree", "disagree", "neutral"):
        name = "unknown"
    return pal(f"stance-{name}", extra)


def meeting_head_renderable(pal: Palette, m: dict[str, Any]) -> RenderableType:
    head = Text()
    head.append(f"{m['id']}  ", style=pal("accent", "bold"))
    head.append(str(m["topic"]), style="bold")
    head.append("   ")
    head.append(f" {meeting_outcome(m).upper()} ", style=pal.tone(meeting_tone(m),
                                                                 "bold reverse"))
    ended = f" · ended {fmt_time(m.get('ended_at'))}" if m.get("ended_at") else ""
    meta = Text(f"{', '.join(m.get('participants') or [])} · round {len(rounds_of(m))} of "
                f"{m.get('max_rounds')} · started {fmt_datetime(m.get('started_at'))}{ended}",
                style=pal.tone("idle"))
    rows: list[RenderableType] = [head, meta]
    if m.get("detail"):
        rows.append(Text(f"why: {m['detail']}", style=pal.tone("idle")))
    if m.get("minutes_path"):
        rows.append(Text(f"minutes: {m['minutes_path']}", style=pal.tone("idle")))
    return Group(*rows)


def current_round_renderable(pal: Palette, m: dict[str, Any],
                             rnd: dict[str, Any]) -> RenderableType:
    running = m.get("status") == "running" and rnd.get("consensus") is None
    replies = {r["agent"]: r for r in rnd.get("replies") or []}
    table = _table(pal, ("Agent", {"no_wrap": True}), ("State", {"no_wrap": True}),
                   ("Stance", {"no_wrap": True}), ("Tokens", {"justify": "right"}),
                   ("Why", {"ratio": 1}))
    agents = list(m.get("participants") or [])
    agents += [a for a in replies if a not in agents]
    for agent in agents:
        r = replies.get(agent)
        state = reply_state(r, running)
        tone = {"thinking": "active", "replied": "done", "timed out": "waiting",
                "absent": "idle"}.get(state, "failed")
        if r is None:
            table.add_row(agent, Text(state, style=pal.tone(tone, "italic")), "", "", "")
            continue
        stance = str(r.get("stance") or "UNKNOWN")
        tokens = f"{r.get('prompt_tokens') or 0}+{r.get('completion_tokens') or 0}"
        table.add_row(agent, Text(state, style=pal.tone(tone)),
                      Text(STANCE_LABEL.get(stance, stance.lower()),
                           style=stance_style(pal, stance, "bold")),
                      Text(tokens, style=pal.tone("idle")), one_line(str(r.get("why") or ""),
                                                                     200))
    return table


def stance_table(pal: Palette, m: dict[str, Any]) -> RenderableType:
    """Rows agents, columns rounds; the running round shows who is still thinking."""
    rounds = rounds_of(m)
    running = m.get("status") == "running"
    table = _table(pal, ("Agent", {"no_wrap": True}),
                   *[(f"R{r['round']}", {"no_wrap": True}) for r in rounds])
    agents = list(m.get("participants") or [])
    for agent in agents:
        cells: list[Any] = [agent]
        for i, rnd in enumerate(rounds):
            reply = next((x for x in rnd.get("replies") or [] if x["agent"] == agent), None)
            live = running and i == len(rounds) - 1 and rnd.get("consensus") is None
            state = reply_state(reply, live)
            if reply is None:
                cells.append(Text("…" if state == "thinking" else "", style=pal.tone("active")))
                continue
            stance = str(reply.get("stance") or "UNKNOWN")
            label = STANCE_LABEL.get(stance, stance.lower())
            if state == "timed out":
                label += " (timeout)"
            elif state == "error":
                label += " (error)"
            cells.append(Text(label, style=stance_style(pal, stance)))
        table.add_row(*cells)
    verdict: list[Any] = [Text("consensus", style=pal.tone("idle", "bold"))]
    for rnd in rounds:
        c = rnd.get("consensus")
        verdict.append(Text(str(c or "…"), style=pal.tone(
            "done" if c in ("FULL", "MAJORITY") else "idle", "bold")))
    table.add_row(*verdict)
    return table


def tokens_table(pal: Palette, rounds: list[dict[str, Any]]) -> RenderableType:
    table = _table(pal, ("Round", {"justify": "right"}), ("Prompt", {"justify": "right"}),
                   ("Completion", {"justify": "right"}), ("Summary", {"justify": "right"}),
                   ("Agree/Dis/Neu", {"no_wrap": True}), ("Consensus", {"ratio": 1}))
    for rnd in rounds:
        replies = rnd.get("replies") or []
        prompt = rnd.get("prompt_tokens")
        if prompt is None:
            prompt = sum(int(r.get("prompt_tokens") or 0) for r in replies)
        completion = rnd.get("completion_tokens")
        if completion is None:
            completion = sum(int(r.get("completion_tokens") or 0) for r in replies)
        counts = ("" if rnd.get("agree") is None else
                  f"{rnd.get('agree')}/{rnd.get('disagree')}/{rnd.get('neutral')}")
        table.add_row(str(rnd["round"]), str(prompt), str(completion),
                      str(rnd.get("summary_tokens") or ""), counts,
                      str(rnd.get("consensus") or "…"))
    return table
