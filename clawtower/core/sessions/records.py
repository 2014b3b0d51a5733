"""The store as a session job's turn sees it (`TurnRecords`): progress records are queued
into the job's next commit instead of awaited one commit each."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TypeVar

from .. import events as ev
from ..errors import ClawError
from ..events import NewEvent
from ..store.interface import Store, WriteTx
from ..store.view import StoreView

T = TypeVar("T")

_PROGRESS = (ev.TurnStarted, ev.AgentUsage)


class TurnRecords(StoreView):
    """The store as a job's turn sees it: the turn's progress records (`turn.started`, a
    final call's `agent.usage`) are queued in order (`Store.submit`) rather than awaited one
    commit each; they commit in the same batch as the job's finish (or any earlier write),
    which the worker awaits. Everything else (tool calls and results, steering) is awaited
    as before, and queued records ahead of it commit with it. A zero-latency child thus
    waits for two commits (claim, finish) instead of five.

    The turn's end (`turn.finished`, the turn's last record) is held, not written (issue
    36): the job's finish folds it into `turnjob.finished` (`finish._finish`), a pause for
    approval writes it beside `turnjob.waiting` (`claims._pause`): each is handed `end`
    and the worker clears it once written. A worker that gave the job up (or whose finish
    failed) writes it alone if the turn is still open (`write_end`). A storage fault
    writes nothing: the take-over closes the turn. A job's turn thus writes
    `turnjob.started` (its start, or the `start` of its session's `session.created` when it
    was claimed there), tool calls and results, and `turnjob.finished` (its
    end, its reply, its session's end)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.queued: list[asyncio.Future[list[int]]] = []
        self.end: NewEvent | None = None  # the turn's `turn.finished`, held

    def write_end(self, turn_id: str) -> None:
        """Queue the held end on its own, written if the turn is still open then (a worker
        stopping with its job unfinished, as before issue 36; a job taken over meanwhile
        had its turn closed by the take-over, and nothing of ours is written)."""
        end, self.end = self.end, None
        if end is None:
            return

        def command(tx: WriteTx) -> list[int]:
            row = tx.one("SELECT status FROM turns WHERE id=?", (turn_id,))
            if row is None or row["status"] != "running":
                return []
            return [tx.emit(end).seq]

        self.queued.append(self.store.submit(command))

    async def append(self, events: Sequence[NewEvent]) -> list[int]:
        evs = list(events)
        if len(evs) == 1 and isinstance(evs[0].payload, ev.TurnFinished):
            self.end = evs[0]
            return []  # not committed yet: no sequence number to report
        if evs and all(isinstance(e.payload, _PROGRESS) for e in evs):
            self.queued.append(self.store.submit(lambda tx: [tx.emit(e).seq for e in evs]))
            return []  # not committed yet: no sequence numbers to report
        return await self.store.append(evs)

    def failures(self) -> list[str]:
        """Queued records whose command failed (checked once a later write returned)."""
        return [str(f.exception()) for f in self.queued
                if f.done() and not f.cancelled() and f.exception() is not None]

    async def close(self) -> None:
        raise ClawError("a turn does not close the store")


__all__ = ["TurnRecords"]
