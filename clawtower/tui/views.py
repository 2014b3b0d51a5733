"""The console's lists and bars, built on RowList and fed from ConsoleModel."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Static
from textual.widgets._footer import FooterKey

from clawtower.core.describe import event_summary, one_line

from .columns import Column
from .model import PHASE_ORDER, PHASE_TONE, fmt_time
from .protocol import ConsoleApp
from .rowlist import Cell, RowList
from .traceview import trace_binding
from .workflowdata import run_status

if TYPE_CHECKING:
    from clawtower.core import StoredEvent


def phase_label(phase: str) -> str:
    return phase.replace("_", " ")


class TaskList(RowList):
    """Every task, grouped by phase (what waits on a human first)."""

    columns: ClassVar[Sequence[Column]] = (
        Column("ID", width=7), Column("Title", ratio=3), Column("Att", width=3, justify="right"),
        Column("Updated", width=8), Column("Why it is here", ratio=4),
    )
    grouped = True
    group_order = PHASE_ORDER
    empty_text = "no tasks yet — create one with `clawtower task create SPEC.yaml`"

    def row_cells(self, key: Hashable, data: Any) -> Sequence[Cell]:
        return [
            (data["id"], "key"),
            data["title"],
            (str(data["attempts"] or ""), "dim"),
            (fmt_time(data["updated_at"]), "dim"),
            (one_line(data["phase_reason"]), "dim"),
        ]

    def row_search_text(self, key: Hashable, data: Any) -> str:
        return f"{data['id']} {data['title']} {data['phase']} {data['phase_reason']}"

    def row_sort_key(self, key: Hashable, data: Any) -> Any:
        return data["num"]

    def row_group(self, key: Hashable, data: Any) -> str:
        return str(data["phase"])

    def group_cells(self, group: str, count: int, collapsed: bool) -> Sequence[Cell]:
        mark = "▸" if collapsed else "▾"
        tone = PHASE_TONE.get(group, "idle")
        return [(f"{mark} ", None), (phase_label(group).upper(), tone), (f"  {count}", "dim")]

    def load(self, tasks: Iterable[dict[str, Any]]) -> None:
        self.set_rows((t["id"], t["last_seq"], t) for t in tasks)

    def apply(self, tasks: Iterable[dict[str, Any]]) -> None:
        self.update_rows((t["id"], t["last_seq"], t) for t in tasks)


class ApprovalList(RowList):
    """Pending decisions of every kind."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "screen.approve", "Approve", id="approval.approve",
                tooltip="Approve the selected item (asks to confirm)"),
        Binding("a", "screen.explain('approve')", show=False, system=True),
        Binding("r", "screen.reject", "Reject", id="approval.reject",
                tooltip="Reject the selected item (asks for a reason, then to confirm)"),
        Binding("r", "screen.explain('reject')", show=False, system=True),
    ]

    columns: ClassVar[Sequence[Column]] = (
        Column("ID", width=8), Column("Kind", fit=20, min_width=10),
        Column("Subject", fit=12, hide_below=60),  # a title starts with its subject
        Column("Title", ratio=1, min_width=12), Column("Asked", width=8, hide_below=50),
    )
    empty_text = "nothing waits for a decision"

    def row_cells(self, key: Hashable, data: Any) -> Sequence[Cell]:
        return [
            (data["id"], "key"), (data["kind"], "dim"), data["subject"], data["title"],
            (fmt_time(data["requested_at"]), "dim"),
        ]

    def row_sort_key(self, key: Hashable, data: Any) -> Any:
        return data["seq"]

    def load(self, approvals: Iterable[dict[str, Any]]) -> None:
        self.set_rows((a["id"], a["seq"], a) for a in approvals)


def event_tone(e: StoredEvent) -> str | None:
    p = e.payload
    t = e.type
    if t == "task.transitioned":
        return PHASE_TONE.get(str(getattr(p, "to_phase", "")), None)
    if t == "approval.decided":
        return "done" if getattr(p, "decision", "") == "approved" else "failed"
    if t in ("approval.requested", "circuit.opened", "workflow.paused"):
        return "waiting"
    if t == "workflow.resumed":
        return "done"
    if t == "attempt.finished":
        return "done" if getattr(p, "status", "") == "succeeded" else "failed"
    if t == "permission.refused":
        return "failed"
    if t == "review.appended":
        verdict = str(getattr(p, "verdict", ""))
        return "done" if verdict in ("approved", "approve") else "waiting"
    return None


class EventLog(RowList):
    """The newest events of the store, any process's, as they land."""

    columns: ClassVar[Sequence[Column]] = (
        Column("Time", width=8), Column("Seq", width=6, justify="right"),
        Column("Subject", width=10), Column("Event", width=18), Column("Actor", width=12),
        Column("Detail", ratio=1),
    )
    empty_text = "no events yet"
    tail = True
    blur_cursor = False

    def row_cells(self, key: Hashable, data: Any) -> Sequence[Cell]:
        e: StoredEvent = data
        return [
            (fmt_time(e.ts), "dim"), (str(e.seq), "dim"), (e.entity_id, "key"),
            (e.type, event_tone(e)), (e.actor, "dim"), event_summary(e),
        ]

    def row_sort_key(self, key: Hashable, data: Any) -> Any:
        return key

    def load(self, events: Iterable[StoredEvent]) -> None:
        self.set_rows((e.seq, e.seq, e) for e in events)


def key_width(key: FooterKey) -> int:
    """The cells a (non-compact) footer key takes: ` k Label `."""
    return cell_len(key.key_display) + 2 + (cell_len(key.description) + 1
                                            if key.description else 0)


class KeyBar(Footer):
    """The footer: the current mode's keys, each whole. When they do not all fit (an
    80-column terminal), the last ones leave rather than a label being cut mid-word, and
    `?` says "More": its key panel lists every key. The mode's own keys come first in
    the footer, so the app-wide ones (`:`, `q`) are the ones that leave first."""

    def compose(self) -> ComposeResult:
        widgets = list(super().compose())
        keys = [w for w in widgets if isinstance(w, FooterKey)
                and not w.has_class("-command-palette")]
        rest = [w for w in widgets if not any(w is k for k in keys)]
        if self.compact or any(not isinstance(w, FooterKey) for w in rest):
            yield from widgets  # groups or the compact style: Textual's own layout
            return
        # the palette key is docked right (its border takes its key's left pad)
        room = (self.size.width or self.app.size.width) - sum(key_width(w) for w in rest
                                                              if isinstance(w, FooterKey))
        if sum(key_width(k) for k in keys) <= room:
            yield from widgets
            return
        more = next((k for k in keys if k.action.endswith("toggle_help")), None)
        if more is not None:
            more.description = "More"  # short: the room it takes is a key's
            room -= key_width(more)
        for key in keys:
            if key is more:
                continue
            if key_width(key) > room:
                break
            room -= key_width(key)
            yield key
        if more is not None:
            yield more
        yield from rest

    _recompose_queued = False

    def bindings_changed(self, screen: Screen[Any]) -> None:
        """Textual's footer recomposes once per bindings signal; at start-up three come at
        once (four recomposes of every key before the first paint): one queued at a time."""
        self._bindings_ready = True
        if screen.app.app_focus and self.is_attached and screen is self.screen:
            self._recompose_soon()

    def on_resize(self, event: events.Resize) -> None:
        if self._bindings_ready:
            self._recompose_soon()

    def _recompose_soon(self) -> None:
        if self._recompose_queued:
            return
        self._recompose_queued = True

        async def run() -> None:
            self._recompose_queued = False
            await self.recompose()

        self.call_after_refresh(run)


class ModeBar(Static):
    """Top bar: the modes (clickable), the engine's state, the operator and the store."""

    MODES: ClassVar[list[tuple[str, str, str]]] = [
        ("1", "tasks", "Tasks"), ("2", "approvals", "Approvals"),
        ("3", "meetings", "Meetings"), ("4", "sessions", "Sessions"),
        ("5", "workflows", "Workflows"), ("6", "experts", "Experts"), ("7", "flows", "Flows"),
        ("8", "triggers", "Triggers"),
    ]

    def __init__(self, mode: str, *, id: str | None = None) -> None:
        super().__init__(id=id, markup=False)
        self.mode = mode

    SHORT: ClassVar[dict[str, str]] = {"tasks": "Tasks", "approvals": "Appr",
                                        "meetings": "Meet", "sessions": "Sess",
                                        "workflows": "Wkfl", "experts": "Expt",
                                        "flows": "Flow", "triggers": "Trig"}

    def on_mount(self) -> None:
        self.update_bar()

    def on_resize(self) -> None:
        self.update_bar()

    def _modes(self, app: ConsoleApp, size: int) -> Content:
        """size 0: full labels; 1: short labels; 2: numbers, only the current mode named."""
        parts: list[Content] = [Content.from_markup("[b] clawtower [/b]")]
        pending = len(app.model.approvals)
        for key, mode, label in self.MODES:
            extra = f" ({pending})" if mode == "approvals" and pending else ""
            name = (label if size == 0 or (size == 2 and mode == self.mode) else
                    self.SHORT.get(mode, label[:4]) if size == 1 else "")
            text = f" {key}{' ' if name else ''}{name}{extra} "
            if mode == self.mode:
                parts.append(Content.styled(text, "reverse bold"))
            else:
                style = "$warning" if extra else ""
                parts.append(Content.from_markup(
                    f"[@click=app.switch_mode('{mode}')]$text[/]", text=text).stylize(style))
        return Content("").join(parts)

    def update_bar(self) -> None:
        """The modes on the left, the engine's state on the right. When the terminal is narrow
        (80 columns), the store's name, then the operator, then the mode labels' length (short
        labels, then numbers with only the current mode named) give way: every mode's key and
        the engine's state always show."""
        app = cast(ConsoleApp, self.app)
        width = self.size.width or 120
        engine = f"engine: {app.engine_status()}"
        fault = app.store_fault()
        if fault is not None:  # the one thing an operator must see: writes are waiting
            engine = f"{fault} · {engine}"
        rights = [f"{engine} · {app.operator} · {Path(app.db_path).name} ",
                  f"{engine} · {app.operator} ", f"{engine} "]
        for size in (0, 1, 2):
            left = self._modes(app, size)
            for right in rights:
                if left.cell_length + 1 + len(right) <= width:
                    break
            else:
                continue
            break
        gap = max(1, width - left.cell_length - len(right))
        tone = "$text-muted" if fault is None else "bold $error"
        self.update(Content.assemble(left, " " * gap, Content(right).stylize(tone)))


def meeting_tone(m: dict[str, Any]) -> str:
    if m.get("orphaned"):
        return "failed"
    if m.get("status") == "running":
        return "active"
    if m.get("result") in ("FULL", "MAJORITY"):
        return "done"
    if m.get("reason") in ("stopped", "timeout", "error"):
        return "waiting"
    return "failed"


def meeting_outcome(m: dict[str, Any]) -> str:
    if m.get("orphaned"):
        return "orphaned"
    if m.get("status") == "running":
        return "running"
    result = str(m.get("result") or "")
    reason = str(m.get("reason") or "")
    if result in ("FULL", "MAJORITY"):
        return result.lower()
    return reason.replace("_", " ") or "ended"


class ItemList(RowList):
    """Rows keyed by each item's "id", redrawn when `version(item)` changes."""

    @staticmethod
    def version(item: dict[str, Any]) -> Hashable:
        return item.get("last_seq")

    def load(self, items: Iterable[dict[str, Any]]) -> None:
        self.set_rows((d["id"], self.version(d), d) for d in items)


class MeetingList(ItemList):
    """Every meeting, newest first; the running ones live."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "screen.stop_meeting", "Stop", id="meeting.stop",
                tooltip="Stop the selected meeting (asks to confirm)"),
        Binding("s", "screen.explain('stop_meeting')", show=False, system=True),
        Binding("plus", "screen.grant_round", "+1 round", id="meeting.grant",
                tooltip="Grant the selected meeting one more round"),
        Binding("plus", "screen.explain('grant_round')", show=False, system=True),
    ]

    columns: ClassVar[Sequence[Column]] = (
        Column("ID", fit=20, min_width=12), Column("Topic", ratio=1, min_width=12),
        Column("Round", width=5, justify="right"), Column("Outcome", fit=11, min_width=8),
        Column("Started", width=8, hide_below=56),
    )
    empty_text = "no meetings yet — start one with `:meeting ada,ben,cyd TOPIC`"

    def row_cells(self, key: Hashable, data: Any) -> Sequence[Cell]:
        rounds = data.get("rounds")
        n = len(rounds) if isinstance(rounds, list) else int(rounds or 0)
        return [
            (data["id"], "key"),
            one_line(data["topic"]),
            (f"{n}/{data.get('max_rounds') or '?'}", "dim"),
            (meeting_outcome(data), meeting_tone(data)),
            (fmt_time(data.get("started_at")), "dim"),
        ]

    def row_search_text(self, key: Hashable, data: Any) -> str:
        return f"{data['id']} {data['topic']} {' '.join(data.get('participants') or [])}"

    def row_sort_key(self, key: Hashable, data: Any) -> Any:
        return (-(data.get("started_at") or 0.0), str(data["id"]))

    @staticmethod
    def version(m: dict[str, Any]) -> Hashable:
        rounds = m.get("rounds")
        n = len(rounds) if isinstance(rounds, list) else rounds
        return (m.get("status"), m.get("orphaned"), n, m.get("max_rounds"), m.get("result"),
                m.get("reason"), m.get("ended_at"))



class WorkflowList(ItemList):
    """Every workflow run, newest first; running and paused ones live."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "screen.decide_gate(True)", "Approve/answer", id="workflow.approve",
                tooltip="Decide the selected run's gate: approve (or answer an input gate)"),
        Binding("a", "screen.explain('decide_gate')", show=False, system=True),
        Binding("r", "screen.decide_gate(False)", "Reject", id="workflow.reject",
                tooltip="Reject the selected run's gate (asks a reason): the run is cancelled"),
        Binding("r", "screen.explain('decide_gate')", show=False, system=True),
        Binding("c", "screen.cancel_run", "Cancel run", id="workflow.cancel",
                tooltip="Cancel the selected paused or orphaned run (asks to confirm)"),
        Binding("c", "screen.explain('cancel_run')", show=False, system=True),
        Binding("t", "screen.recover_run('retry')", "Retry step", id="workflow.retry",
                tooltip="Run again the step a dead driver left interrupted (asks to confirm)"),
        Binding("t", "screen.explain('recover_run')", show=False, system=True),
        Binding("k", "screen.recover_run('skip')", "Skip step", id="workflow.skip",
                tooltip="Go on after the step a dead driver left interrupted, as if done"
                        " (asks to confirm)"),
        Binding("k", "screen.explain('recover_run')", show=False, system=True),
        Binding("R", "screen.rerun_run", "Rerun from", id="workflow.rerun",
                tooltip="A new run from a step of the selected run (pick the step, confirm);"
                        " the steps before it keep their recorded outputs"),
        Binding("R", "screen.explain('rerun_run')", show=False, system=True),
        *trace_binding("run"),
    ]

    columns: ClassVar[Sequence[Column]] = (
        Column("Run", fit=10), Column("Workflow", ratio=1, min_width=12),
        Column("Steps", width=7, justify="right"), Column("Status", fit=18, min_width=8),
        Column("Started", width=8, hide_below=56),
    )
    empty_text = "no workflow runs yet — `clawtower workflow run --file F` or `:workflow F`"

    @staticmethod
    def version(item: dict[str, Any]) -> Hashable:
        return (item.get("last_seq"), item.get("driver"))  # a driver dies without an event

    def row_cells(self, key: Hashable, data: Any) -> Sequence[Cell]:
        status, tone = run_status(data)
        return [
            (data["id"], "key"),
            one_line(str(data.get("name") or data.get("file") or "")),
            (f"{data['steps_done']}/{data['steps_total']}", "dim"),
            (status, tone),
            (fmt_time(data.get("started_at")), "dim"),
        ]

    def row_search_text(self, key: Hashable, data: Any) -> str:
        return f"{data['id']} {data.get('name') or ''} {data.get('file') or ''} {data['status']}"

    def row_sort_key(self, key: Hashable, data: Any) -> Any:
        return (-(data.get("started_at") or 0.0), str(data["id"]))

