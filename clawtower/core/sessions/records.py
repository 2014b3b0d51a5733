"""The store as a session job's turn sees it (`TurnRecords`): progress records are queued
into the job's next commit instead of awaited one commit each."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TypeVar

from .. import events as ev
from ..errors import ClawError
from ..events import NewEvent
from ..store.interface import Store
from ..store.view import StoreView

T = TypeVar("T")

_PROGRESS = (ev.TurnStarted, ev.AgentUsage, ev.TurnFinished)


class TurnRecords(StoreView):
    """The store as a job's turn sees it: the turn's progress records (`turn.started`, a
    final call's `agent.usage`, `turn.finished`) are queued in order (`Store.submit`) rather
    than awaited one commit each; they commit in the same batch as the job's finish (or
    any earlier write), which the worker awaits. Everything else (tool calls and results,
    steering) is awaited as before, and queued records ahead of it commit with it. A zero-
    latency child thus waits for two commits (claim, finish) instead of five."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.queued: list[asyncio.Future[list[int]]] = []

    async def append(self, events: Sequence[NewEvent]) -> list[int]:
        evs = list(events)
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
