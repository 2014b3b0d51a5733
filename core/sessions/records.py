"""The store as a session job's turn sees it (`TurnRecords`): progress records are queued
into the job's next commit instead of awaited one commit each."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, TypeVar

from .. import events as ev
from ..errors import ClawError
from ..events import NewEvent, StoredEvent
from ..store.interface import Command, Store

T = TypeVar("T")

_PROGRESS = (ev.TurnStarted, ev.AgentUsage, ev.TurnFinished)


class TurnRecords:
    """The store as a job's turn sees it: the turn's progress records (`turn.started`, a
    final call's `agent.usage`, `turn.finished`) are queued in order (`Store.submit`) rather
    than awaited one commit each; they commit in the same batch as the job's finish (or
    any earlier write), which the worker awaits. Everything else (tool calls and results,
    steering) is awaited as before, and queued records ahead of it commit with it. A zero-
    latency child thus waits for two commits (claim, finish) instead of five."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.path = store.path
        self.clock = store.clock
        self.queued: list[asyncio.Future[list[int]]] = []

    async def execute(self, command: Command[T]) -> T:
        return await self.store.execute(command)

    def submit(self, command: Command[T]) -> asyncio.Future[T]:
        return self.store.submit(command)

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

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return await self.store.fetchall(sql, params)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        return await self.store.fetchone(sql, params)

    async def fetch_many(self, queries: Sequence[tuple[str, Sequence[Any]]]
                         ) -> list[list[dict[str, Any]]]:
        return await self.store.fetch_many(queries)

    async def events_after(self, seq: int, limit: int = 1000, entity_id: str | None = None
                           ) -> list[StoredEvent]:
        return await self.store.events_after(seq, limit, entity_id)

    async def last_seq(self) -> int:
        return await self.store.last_seq()

    async def wait_for_change(self, after_seq: int, timeout: float) -> int:
        return await self.store.wait_for_change(after_seq, timeout)

    async def verify_projections(self) -> list[str]:
        return await self.store.verify_projections()

    async def rebuild_projections(self) -> int:
        return await self.store.rebuild_projections()

    async def close(self) -> None:
        raise ClawError("a turn does not close the store")


__all__ = ["TurnRecords"]
