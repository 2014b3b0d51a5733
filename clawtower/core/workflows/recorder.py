"""A driven run's step progress as events of the run (the runner's Recorder for the store).

Before each step starts, a cancel made by any process is honoured (a step already in flight
finishes first), and the start is committed before the step's process exists, under the
driver's lease. Facts that follow one another with nothing in between are written as one
event (issue 24.2): a step's result carries the next step's start (`step_finished.next`),
and a gate's start waits for its pause (`Workflows._pause` folds it in with the gate's
approval request and the lease let go), so a step in a row costs two events, not three.
A resume's claim of its gate (`opening`) is likewise written by the run's next write, so a
gate that follows a gate costs one commit, not two (issue 36).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .. import events as ev
from .. import leases
from ..events import NewEvent
from ..liveness import process_tag
from ..store.interface import Store, WriteTx
from ..tasks.permissions import Role
from . import events as wev

T = TypeVar("T")

SAFE_KINDS = ("approval", "input", "none")  # steps with no effect of their own


def lease_name(run_id: str) -> str:
    return f"workflow:{run_id}"


class RunCancelled(Exception):
    """The run was cancelled from elsewhere (another process, the console) while it ran."""


class LeaseLost(Exception):
    """Another process adopted the run (this driver stalled past its lease)."""


class HandedOver(Exception):
    """This process is stopping and hands the run over at a step boundary (its lease is
    released, nothing is failed): any engine on the store drives it on from that step."""


class StoreRecorder:
    """Writes a run's step events. `held` is a step's result not written yet: it goes with
    the next write (the next step's start, a skip, a failure, or `flush` before the run ends
    or pauses), always before any later step has an effect."""

    def __init__(self, store: Store, run_id: str, actor: str, owner: str, ttl: float,
                 handing_over: Callable[[], bool] = lambda: False) -> None:
        self.store, self.run_id, self.actor = store, run_id, actor
        self.owner, self.ttl = owner, ttl
        self.handing_over = handing_over
        self.gate_output: wev.WorkflowStepFinished | None = None  # written with the pause
        self.gate_start: wev.WorkflowStepStarted | None = None  # written with the pause
        self.held: wev.WorkflowStepFinished | None = None
        # a resume's claim of its gate (Decisions._consume): run first by the next write of
        # this run, before anything with an effect starts; None once it is committed
        self.opening: Callable[[WriteTx], None] | None = None

    async def write(self, command: Callable[[WriteTx], T]) -> T:
        """A write of this run: the resume's claim first, if it is not committed yet
        (GateDecided from it rolls the whole write back), then `command`."""
        opening = self.opening

        def run(tx: WriteTx) -> T:
            if opening is not None:
                opening(tx)
            return command(tx)

        out = await self.store.execute(run)
        self.opening = None
        return out

    def spawned(self, step_id: str, pid: int) -> None:
        """Not awaited: the group's leader dies with this process anyway (shell.py); the
        record lets an adopter kill what the leader left behind."""
        event = self._event(wev.WorkflowStepSpawned(step_id=step_id, process=process_tag(pid)))
        self.store.submit(lambda tx: tx.emit(event))

    def _event(self, payload: ev.Payload) -> NewEvent:
        return NewEvent(entity_id=self.run_id, actor=self.actor, role=Role.SYSTEM.value,
                        payload=payload)

    def _pending(self) -> list[ev.Payload]:
        """What was kept for the next write, in the order it happened."""
        out: list[ev.Payload] = [p for p in (self.gate_start, self.held) if p is not None]
        self.gate_start = self.held = None
        return out

    def _fenced(self, tx: WriteTx) -> bool:
        """This driver still holds the run's lease (a driver that stalled and lost its run to
        another process writes nothing more: the new driver settles that step)."""
        name = lease_name(self.run_id)
        held = leases.holder(tx, name)
        if held is not None and held["owner"] != self.owner:
            return False
        if held is None:  # lapsed while we stalled: ours again only if nobody took it
            last = tx.one("SELECT owner, released FROM leases WHERE name=?", (name,))
            if ((last is not None and (last["owner"] != self.owner or last["released"]))
                    or not leases._acquire(tx, name, self.owner, self.ttl)):
                return False
        return True

    async def _emit(self, *payloads: ev.Payload) -> None:
        """A step's result, skip or failure (and what was kept for it), fenced by the run's
        lease in the same commit."""
        events = [self._event(p) for p in (*self._pending(), *payloads)]
        if not events and self.opening is None:
            return

        def command(tx: WriteTx) -> bool:
            if not self._fenced(tx):
                return False
            for event in events:
                tx.emit(event)
            return True

        if not await self.write(command):
            raise LeaseLost(self.run_id)

    async def flush(self, *, lost_ok: bool = False) -> None:
        """Write what was kept (before the run ends, fails or is handed over); `lost_ok`:
        a run adopted elsewhere meanwhile is not an error here (nothing is written)."""
        try:
            await self._emit()
        except LeaseLost:
            if not lost_ok:
                raise

    async def step_started(self, step_id: str, index: int, kind: str, attempt: int) -> None:
        # Awaited: an adopter must know a step may have had its effect (a start with no
        # result is an interrupted step), so the start is durable before the process runs.
        if self.handing_over():  # before the start: the next driver runs this step afresh
            await self.flush()
            raise HandedOver(self.run_id)
        start = wev.WorkflowStepStarted(step_id=step_id, index=index, kind=kind, attempt=attempt)
        if kind in SAFE_KINDS:
            # a gate has no process and no effect: its start rides in its pause, which
            # finds a run cancelled meanwhile (one commit per gate, no read before it); with
            # no start recorded it simply runs again; a resume's claim waits for it too
            if self.gate_start is not None or self.held is not None:
                await self.flush()
            self.gate_start = start
            return
        before = self._pending()  # a result kept for this start: one event with it
        if before and isinstance(before[-1], wev.WorkflowStepFinished):
            now = [*before[:-1], before[-1].model_copy(update={"next": start})]
        else:
            now = [*before, start]

        def command(tx: WriteTx) -> str:
            row = tx.one("SELECT status FROM workflow_runs WHERE id=?", (self.run_id,))
            if row is not None and row["status"] == "cancelled":
                if before and self._fenced(tx):  # what finished before the cancel, kept
                    for p in before:
                        tx.emit(self._event(p))
                return "cancelled"
            if not self._fenced(tx):
                return "lost"
            for p in now:
                tx.emit(self._event(p))
            return ""

        why = await self.write(command)
        if why == "cancelled":
            raise RunCancelled(self.run_id)
        if why == "lost":
            raise LeaseLost(self.run_id)

    async def step_finished(self, step_id: str, index: int, result: dict[str, Any],
                            branches: dict[str, dict[str, Any]] | None, *,
                            durable: bool = True, cost: list[dict[str, Any]] | None = None
                            ) -> None:
        payload = wev.WorkflowStepFinished(step_id=step_id, index=index, result=result,
                                          branches=branches or {}, cost=cost or [])
        if not durable:
            # An approval step: its output goes with the gate's pause, after
            # approval.requested (Workflows._pause), so the log reads in causal order.
            self.gate_output = payload
            return
        if self.gate_start is not None or self.held is not None:
            await self.flush()
        self.held = payload  # written with the next step's start, or flushed

    async def step_skipped(self, step_id: str, index: int) -> None:
        await self._emit(wev.WorkflowStepSkipped(step_id=step_id, index=index))

    async def step_failed(self, step_id: str, index: int, message: str, policy: str,
                          retrying: bool, *, cost: list[dict[str, Any]] | None = None
                          ) -> None:
        await self._emit(wev.WorkflowStepFailed(step_id=step_id, index=index, error=message,
                                               policy=policy, retrying=retrying,
                                               cost=cost or []))
