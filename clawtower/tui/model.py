"""What the console knows about the store, kept current by one follower (no Textual here).

`StoreFollower.poll()` reads what changed since the last seq it saw and returns a `Delta`:
the task rows whose `last_seq` moved, the newest events for the log, and whether the
pending approvals changed. The app applies deltas to `ConsoleModel` and hands them to the
screens, so widgets update only the rows that changed.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clawtower import core  # its names load on first use: the console paints before them
from clawtower.core.tasks.phases import Phase

from .meetingdata import list_meetings
from .workflowdata import list_runs

if TYPE_CHECKING:
    from clawtower.core import Store, StoredEvent

TASK_COLUMNS = ("id, num, title, phase, attempts, spec_ok, phase_reason, created_at, updated_at,"
                " last_seq")
EVENT_LOG_SIZE = 500
# Periodic lease renewals would drown the log; the lease's holder shows in the mode bar.
QUIET_EVENTS = frozenset({"lease.renewed"})
# a workflow gate's approvals item is asked and decided inside these (issue 24.2)
GATE_EVENTS = frozenset({"workflow.paused", "workflow.resumed"})

# Phases in the order an operator wants to see them: what waits on a human first,
# then work in flight, then the finished.
PHASE_ORDER: list[str] = [p.value for p in (
    Phase.AWAITING_APPROVAL, Phase.CIRCUIT_OPEN, Phase.EXECUTING, Phase.RETRYING,
    Phase.SPEC_GATE, Phase.QUALITY_GATE, Phase.READY_TO_RESUME, Phase.EXECUTION_READY,
    Phase.SPEC_REVIEW, Phase.SPEC_DRAFT, Phase.COMPLETED, Phase.FAILED,
)]

PHASE_TONE: dict[str, str] = {
    "awaiting_approval": "waiting", "circuit_open": "waiting",
    "executing": "active", "retrying": "active", "spec_gate": "active",
    "quality_gate": "active", "ready_to_resume": "active", "execution_ready": "active",
    "spec_review": "active", "spec_draft": "idle", "completed": "done", "failed": "failed",
}


def fmt_time(ts: float | None) -> str:
    """Absolute local wall time of an event (snapshots stay stable under a fixed clock/TZ)."""
    if not ts:
        return ""
    return time.strftime("%H:%M:%S", time.localtime(ts))


def fmt_datetime(ts: float | None) -> str:
    if not ts:
        return ""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
    except (OverflowError, OSError, ValueError):  # 1e308: no calendar date (issue 34)
        return f"{ts!r}"


@dataclass
class Delta:
    """One batch of changes read from the store."""

    seq: int
    tasks: list[dict[str, Any]] = field(default_factory=list)
    events: list[StoredEvent] = field(default_factory=list)
    approvals_changed: bool = False
    lease_changed: bool = False
    meetings: set[str] = field(default_factory=set)  # ids of meetings that changed
    meetings_changed: bool = False  # the meetings list was re-read
    workflows: set[str] = field(default_factory=set)  # ids of workflow runs that changed
    workflows_changed: bool = False  # the runs list was re-read
    full: bool = False

    @property
    def empty(self) -> bool:
        return not (self.tasks or self.events or self.approvals_changed or self.lease_changed
                    or self.meetings_changed or self.workflows_changed or self.full)


@dataclass
class ConsoleModel:
    """Everything the console shows, as plain data."""

    seq: int = 0
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    approvals: list[dict[str, Any]] = field(default_factory=list)
    events: deque[StoredEvent] = field(default_factory=lambda: deque(maxlen=EVENT_LOG_SIZE))
    lease: dict[str, Any] | None = None
    meetings: list[dict[str, Any]] = field(default_factory=list)  # newest first
    workflows: list[dict[str, Any]] = field(default_factory=list)  # runs, newest first
    loaded: bool = False

    def apply_tasks(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            old = self.tasks.get(row["id"])
            if old is not None:
                self.counts[old["phase"]] -= 1
            self.tasks[row["id"]] = row
            self.counts[row["phase"]] += 1

    def approval(self, approval_id: str) -> dict[str, Any] | None:
        for a in self.approvals:
            if a["id"] == approval_id:
                return a
        return None

    def meeting(self, meeting_id: str) -> dict[str, Any] | None:
        for m in self.meetings:
            if m["id"] == meeting_id:
                return m
        return None

    def workflow(self, run_id: str) -> dict[str, Any] | None:
        for r in self.workflows:
            if r["id"] == run_id:
                return r
        return None

    def pending_for(self, subject: str) -> dict[str, Any] | None:
        for a in self.approvals:
            if a["subject"] == subject:
                return a
        return None


class StoreFollower:
    """Reads what changed in the store since the last poll (any process's writes)."""

    def __init__(self, store: Store, model: ConsoleModel) -> None:
        self.store = store
        self.model = model
        self.approvals = core.Approvals(store)

    async def load(self) -> Delta:
        """The first, full read."""
        seq = await self.store.last_seq()
        rows = await self.store.fetchall(f"SELECT {TASK_COLUMNS} FROM tasks ORDER BY num")
        events = await self.store.events_after(max(0, seq - EVENT_LOG_SIZE * 2),
                                               limit=EVENT_LOG_SIZE * 2)
        events = [e for e in events if e.type not in QUIET_EVENTS][-EVENT_LOG_SIZE:]
        delta = Delta(seq=seq, tasks=rows, events=events, approvals_changed=True,
                      lease_changed=True, meetings_changed=True, workflows_changed=True,
                      full=True)
        await self._apply(delta)
        self.model.loaded = True
        return delta

    async def poll(self, newest: int) -> Delta:
        """Read the changes between the model's seq and `newest` (or later)."""
        after = self.model.seq
        delta = Delta(seq=max(newest, after))
        if newest <= after:
            await self._recheck_drivers(delta)
            return delta
        # The log shows only the newest events; far behind, skip straight to them.
        start = max(after, newest - EVENT_LOG_SIZE)
        events = await self.store.events_after(start, limit=EVENT_LOG_SIZE * 4)
        if events:
            delta.seq = max(delta.seq, events[-1].seq)
        types = {e.type for e in events}
        delta.events = [e for e in events if e.type not in QUIET_EVENTS]
        delta.approvals_changed = start > after or any(
            t.startswith("approval.") or t in GATE_EVENTS for t in types)
        delta.lease_changed = start > after or any(
            t.startswith("lease.") or t in GATE_EVENTS for t in types)
        delta.meetings = {e.entity_id for e in events if e.type.startswith("meeting.")}
        delta.meetings_changed = start > after or bool(delta.meetings)
        delta.workflows = {e.entity_id for e in events if e.type.startswith("workflow.")}
        delta.workflows_changed = start > after or bool(delta.workflows)
        delta.tasks = await self.store.fetchall(
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE last_seq > ? ORDER BY num", (after,))
        await self._apply(delta)
        return delta

    async def _recheck_drivers(self, delta: Delta) -> None:
        """A run's or a meeting's process can die without writing anything: while some are
        running, each quiet poll (every ~2 s) looks again whether their processes are still
        there (a meeting's lease lapses, or its process is seen gone)."""
        if any(m["status"] == "running" and not m.get("orphaned")
               for m in self.model.meetings):
            meetings = await list_meetings(self.store)
            before = {m["id"]: m.get("orphaned") for m in self.model.meetings}
            changed = {m["id"] for m in meetings if before.get(m["id"]) != m.get("orphaned")}
            if changed:
                self.model.meetings = meetings
                delta.meetings, delta.meetings_changed = changed, True
        if not any(r["status"] == "running" and r.get("driver") == "alive"
                   for r in self.model.workflows):
            return
        runs = await list_runs(self.store)
        before = {r["id"]: r.get("driver") for r in self.model.workflows}
        changed = {r["id"] for r in runs if before.get(r["id"]) != r.get("driver")}
        if changed:
            self.model.workflows = runs
            delta.workflows, delta.workflows_changed = changed, True

    async def _apply(self, delta: Delta) -> None:
        m = self.model
        if delta.approvals_changed:
            m.approvals = await self.approvals.pending()
        if delta.lease_changed:
            m.lease = await self.store.fetchone(
                "SELECT owner, expires_at, released FROM leases WHERE name LIKE 'engine:%'"
                " ORDER BY released, expires_at DESC LIMIT 1")
        if delta.meetings_changed:
            m.meetings = await list_meetings(self.store)
            if delta.full or not delta.meetings:
                delta.meetings = {x["id"] for x in m.meetings}
        if delta.workflows_changed:
            m.workflows = await list_runs(self.store)
            if delta.full or not delta.workflows:
                delta.workflows = {x["id"] for x in m.workflows}
        m.apply_tasks(delta.tasks)
        m.events.extend(delta.events)
        m.seq = max(m.seq, delta.seq)
