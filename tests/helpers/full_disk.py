"""A full disk for one test, without root: the drill ($CLAWTOWER_DRILL_DISK_FULL, see
core/store/faults.py) caps the store at its size while the flag file exists; `fill` then
uses up the room left in its pages, as a disk that filled up would, so the next write of
any command needs a page it cannot have."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from clawtower.core import events as ev
from clawtower.core.errors import StorageFault
from clawtower.core.events import NewEvent
from clawtower.core.store import open_store
from clawtower.core.store.faults import DRILL_ENV


def fill(db: Path, flag: Path) -> int:
    """Make `db` full (its flag set); returns how many fillers fitted."""
    flag.touch()
    before = os.environ.get(DRILL_ENV)
    os.environ[DRILL_ENV] = str(flag)
    try:
        return asyncio.run(_fill(db))
    finally:
        if before is None:
            os.environ.pop(DRILL_ENV, None)
        else:
            os.environ[DRILL_ENV] = before


async def _fill(db: Path) -> int:
    store = await open_store(db)
    n = 0
    try:
        for size in (3000, 600, 120, 20, 1):
            while True:
                try:
                    await store.append([NewEvent(entity_id="filler", actor="test",
                                                 role="system",
                                                 payload=ev.Note(text="x" * size))])
                    n += 1
                except StorageFault:
                    break
    finally:
        await store.close()
    return n
