"""Mode 1: every task by phase, live, with the event log; enter drills into a task."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical

from ..commands import mode_help
from ..model import Delta
from ..rowlist import RowList
from ..views import EventLog, ModeBar, TaskList
from .base import ConsoleScreen, count_label, explained, task_command_unavailable


class TasksScreen(ConsoleScreen):
    """Mode 1: every task by phase, live; enter drills in; `u` unblocks, `x` cancels the
    selected task (the orchestrator executes the operator's command)."""

    HELP = mode_help(
        "**Tasks** by phase, what waits on you first. `enter` opens a task; `u` "
        "unblocks and `x` cancels the selected one.",
        ("task", "unblock", "retry", "cancel", "filter"))

    MODE = "tasks"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("u", "unblock", "Unblock", id="tasks.unblock",
                tooltip="Unblock the selected task (circuit open): retry, revise, or abandon"),
        explained("u", "unblock"),
        Binding("x", "cancel_task", "Cancel task", id="tasks.cancel",
                tooltip="Cancel the selected task: it ends failed (asks to confirm)"),
        explained("x", "cancel_task"),
    ]

    def _selected_task(self) -> str | None:
        key = self.query_one(TaskList).cursor_key
        return str(key) if key is not None else None

    def unavailable(self, action: str) -> str | None:
        if action in ("unblock", "cancel_task"):
            tid = self._selected_task()
            return task_command_unavailable(self.capp.model.tasks.get(tid) if tid else None,
                                            tid, action)
        return None

    def action_unblock(self) -> None:
        tid = self._selected_task()
        if tid is not None:
            self.capp.request_unblock(tid)

    def action_cancel_task(self) -> None:
        tid = self._selected_task()
        if tid is not None:
            self.capp.request_cancel_task(tid)

    @on(RowList.Highlighted, "#tasks")
    def _task_highlighted(self, event: RowList.Highlighted) -> None:
        self.refresh_bindings()

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
            self.refresh_bindings()  # the selected task's phase may have changed
        if delta.events:
            self.query_one(EventLog).load(self.capp.model.events)
        self._titles()
        super().apply(delta)

    def _titles(self) -> None:
        m = self.capp.model
        waiting = m.counts.get("awaiting_approval", 0) + m.counts.get("circuit_open", 0)
        extra = f" · {waiting} waiting on you" if waiting else ""
        tl = self.query_one(TaskList)
        tl.border_title = f"Tasks · {count_label(tl, len(m.tasks))}{extra}"
        self._filter_subtitle(tl)

    def update_titles(self) -> None:
        self._titles()

    @on(RowList.Selected, "#tasks")
    def _open(self, event: RowList.Selected) -> None:
        self.capp.open_task(str(event.key))

    @on(RowList.Selected, "#events")
    def _open_event_subject(self, event: RowList.Selected) -> None:
        row = self.query_one(EventLog).get(event.key)
        if row is not None and row.entity == "task":
            self.capp.open_task(row.entity_id)
