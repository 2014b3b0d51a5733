"""SQLite store: WAL, one writer connection per process with group commit, separate readers.

Why this shape (see durability notes in the README):
- every write transaction starts with BEGIN IMMEDIATE, so busy waits honour busy_timeout;
- a single writer task drains a queue of commands and runs a whole batch in ONE call on the
  writer connection's thread (one await per batch instead of one per statement), each command
  inside its own SAVEPOINT so one failing command never poisons the others; a small batch
  that can take the write lock at once runs on the loop's own thread instead (loopwrite.py);
- callers are answered only after COMMIT: an acknowledged write is a durable write;
- readers use their own connection in autocommit mode: no read transaction outlives a query.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from ..aio import wait_event
from ..clock import Clock, SystemClock
from ..errors import StorageFault, StoreClosed, StoreError
from .checkpoint import (
    CHECKPOINT_FRAMES,
    RACE_FREE,
    WAL_BOUND_FRAMES,
    WalIndex,
    passive_checkpoint,
)
from .faults import CANNOT_OPEN, READ_ONLY, DiskFullDrill, cause_of
from .ledger import migration_checksum, migration_name
from .loopread import LoopReader, open_loop_reader
from .loopwrite import LoopWrites, begin_now
from .notify import WakeChannel
from .reads import LogReads
from .replay import event_of_row, split_script, verify_connection
from .schema import (
    APPLICATION_ID,
    LATEST_VERSION,
    LEDGER_VERSION,
    MIGRATIONS,
    PROJECTION_TABLES,
)
from .writer import BatchResult, BatchWriter, Job, first_line, run_commands
from .writer import dict_factory as _dict_factory

BUSY_TIMEOUT_MS = 30_000


def check_and_migrate(conn: sqlite3.Connection, path: str) -> int:
    """Refuse foreign or newer files; create or migrate ours. Returns the schema version."""
    try:
        # One read snapshot: another process creating the store commits its tables and its
        # application_id together; read separately, we could see the tables without the id.
        conn.execute("BEGIN")
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        cause = cause_of(exc)
        if cause is not None:  # the file could not be read: the storage's fault, not the file's
            raise StorageFault(path, cause, first_line(exc), "cannot open") from None
        raise StoreError(f"{path}: not a clawtower store ({exc})") from None
    if app_id != APPLICATION_ID and (app_id != 0 or tables):
        raise StoreError(f"{path}: not a clawtower store (foreign SQLite database)")
    if version > LATEST_VERSION:
        raise StoreError(
            f"{path}: written by a newer clawtower (schema v{version}; this build reads up to "
            f"v{LATEST_VERSION}); upgrade clawtower"
        )
    if version == LATEST_VERSION:
        return int(version)
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # another process may have won
        for target, script in MIGRATIONS:
            if target <= version:
                continue
            for statement in split_script(script):
                _migrate_statement(conn, statement)
            conn.execute(f"PRAGMA user_version={target}")
            version = target
        if version >= LEDGER_VERSION:  # what was applied (before the ledger: recorded now)
            now = time.time()
            conn.executemany(
                "INSERT OR IGNORE INTO schema_migrations VALUES (?, ?, ?, ?)",
                [(v, migration_name(v), migration_checksum(s), now)
                 for v, s in MIGRATIONS if v <= version])
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # a full disk has SQLite roll back by itself
            conn.execute("ROLLBACK")
        raise
    return int(version)


def _migrate_statement(conn: sqlite3.Connection, statement: str) -> None:
    """One migration statement; a Python whose SQLite lacks FTS5 (agent memory needs it) is
    told so in one line rather than with SQLite's bare "no such module"."""
    try:
        conn.execute(statement)
    except sqlite3.OperationalError as exc:
        if "no such module: fts5" in str(exc):
            raise StoreError(f"this Python's SQLite ({sqlite3.sqlite_version}) is built without"
                             " FTS5, which agent memory needs; use a Python whose sqlite3"
                             " has FTS5 (python.org and distribution builds do)") from None
        raise


def _enable_wal(conn: sqlite3.Connection) -> str:
    """Switch to WAL. Changing the journal mode can fail with "database is locked" at once,
    without the busy handler, while other processes open the same new file: retry it."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class SQLiteStore(BatchWriter, LogReads):
    """The embedded store. Create with `await open_store(path)`."""

    #: how often waiters look at the file for commits made by other processes (one query
    #: per period per store, shared by all waiters); our own commits wake them at once.
    #: With the wake channel (core/store/notify.py) other clawtower processes ring us after
    #: each commit, and the look is only a safety net, every `safety_poll_s`.
    poll_s = 0.1
    safety_poll_s = 1.0
    #: False: learn of other processes' commits by polling only (benchmarks' "before")
    cross_process_wake = True
    #: WAL checkpoints by a background connection (core/store/checkpoint.py), only where
    #: SQLite has the WAL-reset fix; False: SQLite's auto-checkpoint inside the writer's COMMIT
    background_checkpoints = RACE_FREE
    #: small batches committed on the loop's thread when they need not wait (loopwrite.py);
    #: False: every batch on the writer's thread (benchmarks' "before")
    loop_writes = True

    def __init__(self, path: str, synchronous: str, clock: Clock) -> None:
        self.path = path
        self.synchronous = synchronous
        self.clock = clock
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._loop_reader: LoopReader | None = None  # reads without a thread hop
        self.writes_here = LoopWrites() if self.loop_writes else None  # commits without one
        self._init_writer_state()
        self._polled_at = float("-inf")  # loop time of the last look for other processes' writes
        self._wake = WakeChannel(path) if path != ":memory:" else None
        self._wal = WalIndex(path) if path != ":memory:" and self.background_checkpoints \
            else None
        self._checkpointer: aiosqlite.Connection | None = None
        self._checkpoint_task: asyncio.Task[None] | None = None
        self.checkpoints = 0  # background passes run (tests, benchmarks)
        self._drill = DiskFullDrill.from_env() if path != ":memory:" else None

    # ------------------------------------------------------------------ lifecycle

    async def _open(self) -> None:
        path = Path(self.path)
        if str(path) != ":memory:":
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"{self.path}: cannot create the store's folder ({exc.strerror})"
                ) from None
            if path.exists() and not os.access(path, os.R_OK | os.W_OK):
                raise StorageFault(self.path, READ_ONLY, "the store file is not writable",
                                   "cannot open")
            if path.is_dir():
                raise StoreError(f"{self.path}: is a directory, not a store file")
        try:
            self._writer = await _connect(  # its thread, or the loop's (loopwrite.py)
                self.path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000,
                check_same_thread=False)
            await self._writer._execute(self._init_writer)  # type: ignore[no-untyped-call]
            self._reader = await _connect(
                _ro_uri(self.path), uri=True, isolation_level=None,
                timeout=BUSY_TIMEOUT_MS / 1000,
            )
            self._reader.row_factory = _dict_factory  # type: ignore[assignment]
            await self._reader.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            await self._reader.execute("PRAGMA query_only=1")
            if self.path != ":memory:":
                self._loop_reader = open_loop_reader(_ro_uri(self.path))
        except sqlite3.OperationalError as exc:
            await self._close_connections()
            raise _open_error(self.path, exc) from None
        except BaseException:
            await self._close_connections()
            raise
        self._last_seq = await self.last_seq()
        self._start_writer("clawtower-writer")

    def _init_writer(self) -> None:
        assert self._writer is not None
        conn = self._writer._conn
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        try:
            check_and_migrate(conn, self.path)
        except sqlite3.OperationalError as exc:
            raise _open_error(self.path, exc) from None
        mode = _enable_wal(conn)
        if str(mode).lower() != "wal" and self.path != ":memory:":
            raise StoreError(f"{self.path}: could not switch the store to WAL mode (got {mode})")
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        if self._wal is not None and self._wal.usable:  # checkpoints run in the background
            conn.execute(f"PRAGMA wal_autocheckpoint={WAL_BOUND_FRAMES}")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._stop_writer()
        if self._checkpoint_task is not None:
            with contextlib.suppress(Exception):
                await self._checkpoint_task
        await self._close_connections()
        if self._wake is not None:
            self._wake.close()
        if self._wal is not None:
            self._wal.close()

    async def _close_connections(self) -> None:
        if self._loop_reader is not None:
            self._loop_reader.close()
            self._loop_reader = None
        for conn in (self._checkpointer, self._reader, self._writer):
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
        self._checkpointer = self._reader = self._writer = None

    async def __aenter__(self) -> SQLiteStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ writing

    async def _write_batch(self, jobs: list[Job]) -> BatchResult:
        assert self._writer is not None
        here = self.writes_here
        if here is not None and here.fits(len(jobs)):
            t0 = time.perf_counter()
            result = self._run_batch(jobs, here=True)
            if result is None:  # another process holds the write lock: wait on the thread
                here.back_off()
            else:
                here.took(time.perf_counter() - t0)
                return result
        return await self._writer._execute(  # type: ignore[no-untyped-call,no-any-return]
            self._run_batch, jobs)

    def _committed(self, result: BatchResult) -> None:
        if result.last_seq and self._wake is not None:
            self._wake.ring(result.last_seq)
        if self._wal is not None and self._checkpoint_task is None and not self._closed:
            pending = self._wal.pending()
            if pending is not None and pending >= CHECKPOINT_FRAMES:
                self._checkpoint_task = asyncio.create_task(
                    self._checkpoint(), name="clawtower-checkpoint")

    async def _checkpoint(self) -> None:
        """One PASSIVE checkpoint on a connection of its own: the writer goes on meanwhile.
        A failure is left to the writer's bounded auto-checkpoint (nothing is lost)."""
        try:
            if self._checkpointer is None:
                self._checkpointer = await _connect(
                    self.path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
                await self._checkpointer.execute(f"PRAGMA synchronous={self.synchronous}")
            await self._checkpointer._execute(  # type: ignore[no-untyped-call]
                passive_checkpoint, self._checkpointer._conn)
            self.checkpoints += 1
        except Exception:  # the bound still checkpoints; the next commit tries again
            pass
        finally:
            self._checkpoint_task = None

    def _run_batch(self, jobs: list[Job], here: bool = False) -> BatchResult | None:
        """One IMMEDIATE transaction, a savepoint per command, on the writer's thread; or on
        the loop's (`here`), where None means the write lock was held: nothing ran."""
        assert self._writer is not None
        conn = self._writer._conn
        now = self.clock.now()
        if self._drill is not None:
            self._drill.apply(conn)
        if here:
            if not begin_now(conn, BUSY_TIMEOUT_MS):
                return None
        else:
            conn.execute("BEGIN IMMEDIATE")
        try:
            result = run_commands(conn, jobs, now, self.path, self._columns)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # SQLite rolls back itself on a full disk or I/O error
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise
        return result

    # ------------------------------------------------------------------ reading

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        if self._reader is None:
            raise StoreClosed("the store is closed")
        if self._loop_reader is not None:  # on this thread, within its budget (loopread.py)
            quick = self._loop_reader.fetchall(sql, params)
            if quick is not None:
                await asyncio.sleep(0)  # an await still lets the loop's other tasks run
                return quick
        # execute_fetchall runs the statement to completion in ONE call on the reader's
        # thread: interleaved execute/fetch calls from concurrent coroutines would keep a
        # statement open and pin an old snapshot for everyone sharing the connection.
        rows = await self._reader.execute_fetchall(sql, params)
        return list(rows)  # type: ignore[arg-type]

    async def fetch_many(
        self, queries: Sequence[tuple[str, Sequence[Any]]]
    ) -> list[list[dict[str, Any]]]:
        """Run several queries in ONE call on the reader's thread, in one short read
        transaction: one await instead of one per query, and every result from the same
        snapshot. The transaction ends inside the call, so it never pins the WAL."""
        reader = self._reader
        if reader is None:
            raise StoreClosed("the store is closed")
        if self._loop_reader is not None:
            quick = self._loop_reader.fetch_many(queries)
            if quick is not None:
                await asyncio.sleep(0)
                return quick

        def run() -> list[list[dict[str, Any]]]:
            conn: sqlite3.Connection = reader._conn
            conn.execute("BEGIN")
            try:
                return [conn.execute(sql, params).fetchall() for sql, params in queries]
            finally:
                conn.execute("COMMIT")

        return await reader._execute(run)  # type: ignore[no-untyped-call,no-any-return]

    def _poll_interval(self) -> float:
        wake = self._wake
        if wake is not None and self.cross_process_wake and (
                wake.listening or wake.listen(self._saw)):
            return self.safety_poll_s
        return self.poll_s

    async def wait_for_change(self, after_seq: int, timeout: float) -> int:
        """Return the newest seq once it passes `after_seq`, or the newest known on timeout.

        This process's own commits wake every waiter at once; other clawtower processes
        ring the wake channel after their commits. The file itself is looked at, at most once
        per poll interval for all waiters together (`safety_poll_s` with the channel,
        `poll_s` without): a wake-up never waits behind a query on the shared reader."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        poll_s = self._poll_interval()
        while True:
            if self._last_seq > after_seq:
                return self._last_seq
            now = loop.time()
            if now - self._polled_at >= poll_s:
                self._polled_at = now
                seq = await self.last_seq()
                if seq > self._last_seq:  # another process wrote: tell every waiter
                    self._last_seq = seq
                    self._notify_change()
                continue
            remaining = deadline - now
            if remaining <= 0:
                return self._last_seq
            changed = self._changed  # taken before re-checking: no lost wake-up
            if self._last_seq > after_seq:
                continue
            await wait_event(changed, min(remaining, self._polled_at + poll_s - now))

    # ------------------------------------------------------------------ replay

    async def verify_projections(self) -> list[str]:
        """Replay the log into fresh projections and list every difference with the live ones."""
        return await asyncio.to_thread(verify_file, self.path)

    async def migrations(self) -> list[dict[str, Any]]:
        """The migration ledger: version, name, checksum, applied_at (oldest first)."""
        return await self.fetchall("SELECT * FROM schema_migrations ORDER BY version")

    async def rebuild_projections(self) -> int:
        """Throw the projections away and rebuild them from the log, in one write transaction."""
        if self.writes_here is not None:  # the whole log in one command: not on the loop
            self.writes_here.back_off()

        def command(tx: Any) -> int:
            from . import projections

            conn: sqlite3.Connection = tx.conn
            for table in PROJECTION_TABLES:
                conn.execute(f"DELETE FROM {table}")
            n = 0
            for row in conn.execute("SELECT * FROM events ORDER BY seq").fetchall():
                projections.apply(conn, event_of_row(row))
                n += 1
            return n

        return await self.execute(command)


def verify_file(path: str) -> list[str]:
    """Compare live projections with a replay, inside one read snapshot of `path`."""
    live = sqlite3.connect(_ro_uri(path), uri=True, isolation_level=None)
    try:
        live.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        return verify_connection(live)
    finally:
        live.close()


def _open_error(path: str, exc: sqlite3.Error) -> StoreError:
    """Why the store cannot be opened: a storage fault with its cause (exit 1: the store is
    intact, try again once the disk has room), else the store's own problem."""
    cause = cause_of(exc)
    if cause == CANNOT_OPEN and not os.access(Path(path).parent, os.W_OK):
        return StorageFault(path, READ_ONLY, "its folder is not writable", "cannot open")
    if cause is not None:
        return StorageFault(path, cause, first_line(exc), "cannot open")
    return StoreError(f"{path}: cannot open store ({exc})")


def _ro_uri(path: str) -> str:
    """A read-only URI for `path`; '?', '#' and '%' in a path must not be read as URI syntax."""
    return f"file:{urllib.parse.quote(str(Path(path).resolve()))}?mode=ro"



async def _connect(database: str, **kw: Any) -> aiosqlite.Connection:
    """aiosqlite.connect, waiting on failure for its thread to end: aiosqlite stops it without
    waiting, and a thread that answers after the event loop closed (a CLI's error exit right
    after) dies with "Event loop is closed", a traceback in the caller's output."""
    conn = aiosqlite.connect(database, **kw)
    try:
        return await conn
    except BaseException:
        deadline = time.monotonic() + 5
        while conn._thread.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.002)  # no executor: it answers the stop at once
        raise

async def open_store(
    path: str | os.PathLike[str], *, synchronous: str = "NORMAL", clock: Clock | None = None
) -> SQLiteStore:
    """Open (creating or migrating) the store at `path`."""
    if synchronous.upper() not in {"NORMAL", "FULL", "OFF", "EXTRA"}:
        raise StoreError(f"synchronous: unknown mode {synchronous!r}")
    store = SQLiteStore(os.fspath(path), synchronous.upper(), clock or SystemClock())
    await store._open()
    return store

