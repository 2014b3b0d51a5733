"""`StoreView`: the store as one caller sees it, every call passed through to the store.

Why: callers that change how writes are made (a task's drive fences each write with its
claim, core/orchestrator.py; a session turn queues its progress records,
core/sessions/records.py) subclass this one delegation instead of each copying the whole
Store protocol, so a change to the protocol (storage faults, `hold`) is made once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .interface import Command, Store

if TYPE_CHECKING:
    from ..events import NewEvent, StoredEvent
    from .faults import Fault

T = TypeVar("T")


class StoreView:
    """Passes every call to `store`; subclasses override `wrap` (each write's command)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.path = store.path
        self.clock = store.clock

    def wrap(self, command: Command[T]) -> Command[T]:
        return command

    @property
    def fault(self) -> Fault | None:
        return self.store.fault

    @property
    def fault_listeners(self) -> list[Callable[[Fault | None], None]]:
        return self.store.fault_listeners

    def set_hold(self, hold: bool) -> None:
        self.store.set_hold(hold)

    async def execute(self, command: Command[T], *, hold: bool | None = None) -> T:
        return await self.store.execute(self.wrap(command), hold=hold)

    def submit(self, command: Command[T], *, hold: bool | None = None) -> asyncio.Future[T]:
        return self.store.submit(self.wrap(command), hold=hold)

    async def append(self, events: Sequence[NewEvent]) -> list[int]:
        evs = list(events)
        return await self.execute(lambda tx: [tx.emit(e).seq for e in evs])

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
        await self.store.close()


__all__ = ["StoreView"]
