"""The store contract every implementation meets: SQLite (sqlite.py) and PostgreSQL (postgres.py).

Commands are synchronous functions run inside ONE write transaction by the store's writer:
they read current state through `WriteTx`, decide, and `emit` events. Validation and the
write are therefore atomic across processes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..clock import Clock

if TYPE_CHECKING:  # a reader that never decodes an event never builds the payload models
    from ..events import NewEvent, StoredEvent
    from .faults import Fault

T = TypeVar("T")


class WriteTx(Protocol):
    """What a command sees inside the write transaction."""

    now: float

    def emit(self, event: NewEvent) -> StoredEvent: ...

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None: ...

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]: ...

    def defer_error(self, error: Exception) -> None:
        """Commit what was emitted (e.g. a recorded refusal) and then raise `error`."""
        ...

    def cached(self, entity: str, key: Hashable, load: Callable[[], T]) -> T:
        """`load()` at most once per batch for `key`, while no event of `entity` is written:
        for values derived only from `entity`'s projections."""
        ...


Command = Callable[[WriteTx], T]


class Store(Protocol):
    path: str
    clock: Clock  # what `tx.now` reads: readers compare lease expiries against the same time

    @property
    def fault(self) -> Fault | None:
        """The storage fault writes meet now (full disk, read-only, server unreachable)."""
        ...

    @property
    def fault_listeners(self) -> list[Callable[[Fault | None], None]]:
        """Called with the fault when one begins (or changes cause), None once writes land."""
        ...

    async def execute(self, command: Command[T], *, hold: bool | None = None) -> T:
        """Run `command` in one write transaction. On a storage fault: wait for the storage
        while the store holds (`set_hold`), else (or with `hold=False`) raise StorageFault."""
        ...

    def submit(self, command: Command[T], *, hold: bool | None = None) -> asyncio.Future[T]:
        """Queue a command in order with later writes, without waiting for its commit."""
        ...

    def set_hold(self, hold: bool) -> None:
        """Hold writes through storage faults (an engine runs on the store), or stop holding:
        the writes waiting now fail with the fault."""
        ...

    async def append(self, events: Sequence[NewEvent]) -> list[int]: ...

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]: ...

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None: ...

    async def fetch_many(
        self, queries: Sequence[tuple[str, Sequence[Any]]]
    ) -> list[list[dict[str, Any]]]:
        """Several reads in one call and one snapshot (rows as dicts, in query order)."""
        ...

    async def events_after(
        self, seq: int, limit: int = 1000, entity_id: str | None = None
    ) -> list[StoredEvent]: ...

    async def last_seq(self) -> int: ...

    async def wait_for_change(self, after_seq: int, timeout: float) -> int: ...

    async def verify_projections(self) -> list[str]: ...

    async def rebuild_projections(self) -> int: ...

    async def close(self) -> None: ...
