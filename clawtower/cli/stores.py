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

A writing command on a missing file creates it only on its first write that succeeds
(`_LazyStore`): until then it reads the throwaway empty store, and a write is first tried
there, so a command refused for bad input (an unknown id, agent, trigger) leaves the home as
it was: no store file, no -wal/-shm, no folders.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from clawtower.core.errors import StoreError

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Sequence

    from clawtower.core.clock import Clock
    from clawtower.core.events import NewEvent, StoredEvent
    from clawtower.core.store import Store
    from clawtower.core.store.faults import Fault
    from clawtower.core.store.interface import Command

T = TypeVar("T")


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
    if not is_postgres_url(db) and _missing(Path(db)):
        lazy = _LazyStore(db)
        try:
            yield lazy
        finally:
            await lazy.close()
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


EMPTY_PREFIX = "clawtower-empty-"
OWNER = "owner.lock"


@asynccontextmanager
async def _empty_store() -> AsyncIterator[Store]:
    """A fresh store in a temporary folder, removed afterwards: what a read of a store that
    does not exist yet sees (the same answers as a real empty store, from the same code).
    A process killed before its cleanup (SIGKILL, SIGTERM) left its folder behind (~0.7 MB
    in /tmp each): the folder is held (flock) while its process lives, and the next one made
    removes those no process holds (`_sweep_empty_folders`)."""
    from clawtower.core.store import open_store

    _sweep_empty_folders()
    folder, fd = _held_folder()
    try:
        # thrown away at once: nothing to make durable, so no fsync on creating it
        store = await open_store(folder / "clawtower.db", synchronous="OFF")
        try:
            yield store
        finally:
            await store.close()
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)  # after the removal: a sweep never races its owner


def _held_folder() -> tuple[Path, int]:
    import fcntl
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix=EMPTY_PREFIX))
    fd = os.open(folder / ".owner", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(folder / ".owner", folder / OWNER)  # a sweep sees the lock only once it is held
    return folder, fd


def _sweep_empty_folders() -> None:
    """Remove the throwaway stores' folders whose lock no process holds: their process died
    before its cleanup. A folder without the lock (made by an older release) is left as it
    is; a live process's lock is never taken."""
    import tempfile

    from clawtower.core.files import remove_unheld

    for folder in Path(tempfile.gettempdir()).glob(EMPTY_PREFIX + "*"):
        remove_unheld(folder, [folder / OWNER])


class _LazyStore:
    """The store at a missing file `path` for a command that may write: reads see a throwaway
    empty store (the same answers as a real empty one); the first write is tried on it first,
    and only when it succeeds is the real store created (`open_store`) and the write run
    there, on a store in the same (empty) state - or, if another process made the store
    meanwhile, in that state, as any write would be. A write refused for bad input therefore
    creates nothing. From then on everything goes to the real store. Commands are pure
    functions of their transaction (store/interface.py), so trying one twice is safe."""

    def __init__(self, path: str) -> None:
        import contextlib

        self.path = path
        self._real: Store | None = None
        self._empty: Store | None = None
        self._exit = contextlib.AsyncExitStack()
        self._hold: bool | None = None
        self._lock: asyncio.Lock | None = None
        self._listeners: list[Callable[[Fault | None], None]] = []

    async def _inner(self) -> Store:
        if self._real is not None:
            return self._real
        if self._empty is None:
            self._empty = await self._exit.enter_async_context(_empty_store())
        return self._empty

    async def _create(self) -> Store:
        import asyncio

        from clawtower.core.store import open_store

        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._real is None:
                real = await open_store(self.path)
                if self._hold is not None:
                    real.set_hold(self._hold)
                real.fault_listeners.extend(self._listeners)  # who listened before
                self._real = real
            return self._real

    @property
    def clock(self) -> Clock:
        from clawtower.core.clock import SystemClock

        return self._real.clock if self._real is not None else \
            self._empty.clock if self._empty is not None else SystemClock()

    @clock.setter
    def clock(self, clock: Clock) -> None:
        for inner in (self._real, self._empty):
            if inner is not None:
                inner.clock = clock

    @property
    def fault(self) -> Fault | None:
        return self._real.fault if self._real is not None else None

    @property
    def fault_listeners(self) -> list[Callable[[Fault | None], None]]:
        return self._real.fault_listeners if self._real is not None else self._listeners

    async def execute(self, command: Command[T], *, hold: bool | None = None) -> T:
        if self._real is None:
            await (await self._inner()).execute(command, hold=False)  # refused: nothing made
            await self._create()
        assert self._real is not None
        return await self._real.execute(command, hold=hold)

    def submit(self, command: Command[T], *, hold: bool | None = None) -> asyncio.Future[T]:
        import asyncio

        if self._real is not None:
            return self._real.submit(command, hold=hold)
        return asyncio.ensure_future(self.execute(command, hold=hold))

    def set_hold(self, hold: bool) -> None:
        self._hold = hold
        if self._real is not None:
            self._real.set_hold(hold)

    async def append(self, events: Sequence[NewEvent]) -> list[int]:
        return await (await self._create()).append(events)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return await (await self._inner()).fetchall(sql, params)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        return await (await self._inner()).fetchone(sql, params)

    async def fetch_many(
        self, queries: Sequence[tuple[str, Sequence[Any]]]
    ) -> list[list[dict[str, Any]]]:
        return await (await self._inner()).fetch_many(queries)

    async def events_after(
        self, seq: int, limit: int = 1000, entity_id: str | None = None
    ) -> list[StoredEvent]:
        return await (await self._inner()).events_after(seq, limit, entity_id)

    async def last_seq(self) -> int:
        return await (await self._inner()).last_seq()

    async def wait_for_change(self, after_seq: int, timeout: float) -> int:
        return await (await self._inner()).wait_for_change(after_seq, timeout)

    async def verify_projections(self) -> list[str]:
        return await (await self._inner()).verify_projections()

    async def rebuild_projections(self) -> int:
        return await (await self._create()).rebuild_projections()

    async def close(self) -> None:
        try:
            if self._real is not None:
                await self._real.close()
        finally:
            await self._exit.aclose()


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
