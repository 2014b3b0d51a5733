"""Moving a store between backends: `clawtower store copy --from URL --to URL`.

The log is copied verbatim (seq, time, payload text), in chunks, each chunk one write on the
destination; the destination's projections are built by the same handlers as it goes. The
destination must be empty: a copy never merges two logs. `log_digest` hashes a log the same
way on either backend, so both ends can be compared afterwards."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from ..errors import ValidationError
from .interface import Store
from .reads import row_to_event

COLUMNS = "seq, ts, entity, entity_id, type, actor, role, payload, idem_key"


async def _pages(store: Store, chunk: int) -> Any:
    seq = 0
    while True:
        rows = await store.fetchall(
            f"SELECT {COLUMNS} FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (seq, chunk))
        if not rows:
            return
        yield rows
        seq = int(rows[-1]["seq"])


async def copy_log(src: Store, dst: Store, *, chunk: int = 2000,
                   progress: Callable[[int], None] | None = None) -> int:
    """Copy every event of `src` into the empty `dst`. Returns the number copied."""
    existing = await dst.last_seq()
    if existing:
        raise ValidationError(f"{dst.path}: not empty ({existing} events); copy only into a"
                              " new store")
    n = 0
    async for rows in _pages(src, chunk):
        batch = [(row_to_event(r), str(r["payload"])) for r in rows]

        def command(tx: Any, batch: list[Any] = batch) -> None:
            for event, text in batch:
                tx.import_event(event, text)

        await dst.execute(command)
        n += len(rows)
        if progress is not None:
            progress(n)
    return n


async def log_digest(store: Store, chunk: int = 5000) -> tuple[int, str]:
    """(events, sha256 over every logged column of every event), the same on both backends."""
    h = hashlib.sha256()
    n = 0
    async for rows in _pages(store, chunk):
        for r in rows:
            h.update(repr(tuple(r[c.strip()] for c in COLUMNS.split(","))).encode())
        n += len(rows)
    return n, h.hexdigest()
