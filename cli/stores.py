"""Opening the store for a CLI command. Reading commands never create one.

`open_store` creates (and migrates) a missing file, which is right for a command that writes
but not for one that only looks: a mistyped `--db` would answer "nothing here" and leave a
stray store behind. A reading command on a missing file fails instead (exit 2, one line
naming the file), creating neither the file nor its folders: an empty answer with exit 0
would pass for "nothing pending" in a script.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from core.errors import StoreError

if TYPE_CHECKING:
    from core.store import SQLiteStore


def no_store(db: str) -> str:
    return f"no store at {db} yet (nothing has run with this --db)"


def missing_store(db: str) -> StoreError:
    """The error of a reading command on a store that does not exist."""
    return StoreError(f"{no_store(db)}; `clawtower demo` or `clawtower task create SPEC`"
                      " makes one, --db PATH picks another")


def note_no_store(db: str) -> None:
    sys.stderr.write(f"clawtower: {no_store(db)}\n")
    sys.stderr.flush()


def _missing(db: Path) -> bool:
    """No file at `db` yet, but one could be made there. A path that can never be a store
    (under a regular file) is not "missing": open_store reports it, creating nothing."""
    if db.exists():
        return False
    for parent in db.parents:
        if parent.exists():
            return parent.is_dir()
    return True


@asynccontextmanager
async def cli_store(db: str, *, read_only: bool = False) -> AsyncIterator[SQLiteStore]:
    """The store at `db`. With `read_only` and no file at `db`, a StoreError naming `db`
    (nothing is created)."""
    from core.store import open_store  # here: `--help` and usage errors never load the store

    if read_only and _missing(Path(db)):
        raise missing_store(db)
    store = await open_store(db)
    try:
        yield store
    finally:
        await store.close()


async def wait_for_store(db: str, poll_s: float = 0.2) -> None:
    """For a follower (`events --follow`): say there is no store yet, then wait until another
    process creates it, rather than create it here."""
    if not _missing(Path(db)):
        return  # there, or unusable: opening it says which
    import asyncio

    note_no_store(db)
    while _missing(Path(db)):
        await asyncio.sleep(poll_s)


__all__ = ["cli_store", "missing_store", "no_store", "note_no_store", "wait_for_store"]
