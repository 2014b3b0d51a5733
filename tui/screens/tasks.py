"""Mode 1: every task by phase, live, with the event log; enter drills into a task."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical

from ..model import Delta
from ..rowlist import RowList
from ..views import EventLog, ModeBar, TaskList
from .base import ConsoleScreen


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
