"""Reads both stores answer the same way from their SQLite tables (the file, or the
PostgreSQL store's local replica): one copy of the queries, on top of each store's `fetchall`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # payload models load on the first event read, not with the store
    from ..events import StoredEvent


def row_to_event(r: dict[str, Any]) -> StoredEvent:
    from ..events import StoredEvent, decode_logged

    return StoredEvent(
        seq=r["seq"], ts=r["ts"], entity=r["entity"], entity_id=r["entity_id"], type=r["type"],
        actor=r["actor"], role=r["role"], payload=decode_logged(r["seq"], r["type"], r["payload"]),
        idem_key=r["idem_key"],
    )


class LogReads(ABC):
    """`fetchone`, `last_seq` and `events_after` for a store that supplies `fetchall`."""

    @abstractmethod
    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows of one read, as dicts (each store reads its own way)."""

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    async def last_seq(self) -> int:
        row = await self.fetchone("SELECT coalesce(max(seq), 0) AS s FROM events")
        return int(row["s"]) if row else 0

    async def events_after(
        self, seq: int, limit: int = 1000, entity_id: str | None = None
    ) -> list[StoredEvent]:
        if entity_id is None:
            rows = await self.fetchall(
                "SELECT * FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit)
            )
        else:
            rows = await self.fetchall(
                "SELECT * FROM events WHERE entity_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (entity_id, seq, limit),
            )
        return [row_to_event(r) for r in rows]
