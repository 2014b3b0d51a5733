"""Opening the store for a CLI command. Reading commands never create one.

`open_store` creates (and migrates) a missing file, which is right for a command that writes
but not for one that only looks: a mistyped `--db` would leave a stray store behind. A
reading command on a missing file answers as on an empty store ("no tasks yet", `[]`, exit
0; `show ID` is still "no such ..." with exit 2), creating neither the file nor its folders:
it reads a throwaway empty store in a temporary folder, so every command's empty answer is
the one it gives on a real empty store. When the path is not the home's default store, a
one-line note on stderr names it after the answer, so a mistyped `--db` is seen. Store
administration (`store verify|rebuild|info`, the source of `store copy`) is about the file
itself and still refuses a missing one (exit 2).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from clawtower.core.errors import StoreError

if TYPE_CHECKING:
    from clawtower.core.store import Store


def is_postgres_url(db: str) -> bool:
    """A server URL, not a file (kept here: importing core.store loads the store)."""
    return db.startswith(("postgresql://", "postgres://"))


def no_store(db: str) -> str:
    return f"no store at {db} yet (nothing has written to it)"


def missing_store(db: str) -> StoreError:
    """The error of store administration on a store that does not exist."""
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
async def cli_store(db: str, *, read_only: bool = False,
                    must_exist: bool = False) -> AsyncIterator[Store]:
    """The store at `db`. With `read_only` and no file at `db`: a throwaway empty store
    (nothing is created at `db`; a note names a `db` that is not the default), or with
    `must_exist` a StoreError naming `db`."""
    from clawtower.core.store import (
        open_store,  # here: `--help` and usage errors never load the store
    )

    if (read_only or must_exist) and not is_postgres_url(db) and _missing(Path(db)):
        if must_exist:
            raise missing_store(db)
        async with _empty_store() as empty:
            yield empty
        if not _is_default(db):  # a --db named by hand may be a typo: say so (after the
            note_no_store(db)    # answer, and never beside an error: that stays one line)
        return
    store = await open_store(db)
    try:
        yield store
    finally:
        await store.close()


def _is_default(db: str) -> bool:
    from clawtower.core.config import default_db

    try:
        return Path(db).resolve() == default_db().resolve()
    except (OSError, RuntimeError):
        return False


@asynccontextmanager
async def _empty_store() -> AsyncIterator[Store]:
    """A fresh store in a temporary folder, removed afterwards: what a read of a store that
    does not exist yet sees (the same answers as a real empty store, from the same code)."""
    import tempfile

    from clawtower.core.store import open_store

    with tempfile.TemporaryDirectory(prefix="clawtower-empty-") as folder:
        # thrown away at once: nothing to make durable, so no fsync on creating it
        store = await open_store(Path(folder) / "clawtower.db", synchronous="OFF")
        try:
            yield store
        finally:
            await store.close()


async def wait_for_store(db: str, poll_s: float = 0.2) -> None:
    """For a follower (`events --follow`): say there is no store yet, then wait until another
    process creates it, rather than create it here."""
    if is_postgres_url(db) or not _missing(Path(db)):
        return  # there, or unusable: opening it says which
    import asyncio

    note_no_store(db)
    while _missing(Path(db)):
        await asyncio.sleep(poll_s)


__all__ = ["cli_store", "missing_store", "no_store", "note_no_store", "wait_for_store"]
