"""PostgreSQL store: the event log lives in PostgreSQL, projections in a local SQLite replica.

Why this shape (README, "Scale-out"): every projection handler, every command's `tx.one/all`
and every reader's query is SQLite SQL. Instead of a second dialect of all of them (two sets
of projections that could drift), PostgreSQL holds only the authoritative append-only log,
and each process keeps the projections in an in-memory SQLite replica built by the very same
handlers and migrations as the embedded store. So there is ONE set of projections and ONE
contract:

- a write batch takes a transaction-scoped advisory lock (writers on every machine are
  serialised, like BEGIN IMMEDIATE on one file), catches the replica up from the log, runs
  the commands against the replica (a savepoint each, exactly as on SQLite), INSERTs the
  emitted events with the seqs the replica gave them, and COMMITs; only then is the replica
  transaction committed (or rolled back when PostgreSQL refused). Leases, idempotency keys
  and every validation therefore behave as on SQLite, across machines;
- `pg_notify` inside that transaction is delivered at COMMIT: other processes LISTEN and wake
  their waiters at once instead of polling;
- a read catches the replica up (one round trip) and answers from it; when PostgreSQL is
  unreachable it answers from what this process last saw, and writes wait for the server;
- a batch that failed on a lost connection is retried once the server is back: before the
  COMMIT nothing landed; if the COMMIT itself was cut off, the log is checked for the batch's
  first event before anything is run again, so a write is never applied twice.

All PostgreSQL I/O and every replica statement run on ONE thread, so a reader never sees the
replica in the middle of a write batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

import psycopg

from ..aio import wait_event
from ..clock import Clock, SystemClock
from ..errors import StorageFault, StoreClosed, StoreError
from ..events import StoredEvent
from . import projections
from . import replica as replica_mod
from .faults import READ_ONLY, UNREACHABLE, cause_of
from .ledger import migration_checksum, migration_name
from .postgres_url import redact
from .reads import LogReads
from .replay import event_of_row, verify_connection
from .replica import Slot, memory_replica, replica_root
from .schema import LATEST_VERSION, MIGRATIONS
from .writer import BatchResult, BatchWriter, Job, dict_factory, first_line, run_commands

T = TypeVar("T")

#: advisory lock key serialising writers ("ClTW"), and the NOTIFY channel
LOCK_KEY = 0x436C5457
CHANNEL = "clawtower_events"
#: how long a write waits for a lost server to come back before failing
RECONNECT_S = 120.0
#: how long opening waits for an unreachable server (CLAWTOWER_DB_OPEN_TIMEOUT overrides)
OPEN_TIMEOUT_S = 15.0
CATCH_UP_CHUNK = 5000
EVENT_COLUMNS = "seq, ts, entity, entity_id, type, actor, role, payload, idem_key"
INSERT_EVENTS = (f"INSERT INTO clawtower_events ({EVENT_COLUMNS})"
                 " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)")

PG_SCHEMA = f"""
CREATE TABLE clawtower_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE clawtower_events (
    seq       BIGINT PRIMARY KEY,
    ts        DOUBLE PRECISION NOT NULL,
    entity    TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    type      TEXT NOT NULL,
    actor     TEXT NOT NULL,
    role      TEXT NOT NULL,
    payload   TEXT NOT NULL,
    idem_key  TEXT UNIQUE
);
CREATE INDEX clawtower_events_by_entity ON clawtower_events(entity, entity_id, seq);
CREATE FUNCTION clawtower_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'the event log is append-only'; END $$;
CREATE TRIGGER clawtower_events_no_change BEFORE UPDATE OR DELETE ON clawtower_events
FOR EACH ROW EXECUTE FUNCTION clawtower_append_only();
CREATE TRIGGER clawtower_events_no_truncate BEFORE TRUNCATE ON clawtower_events
FOR EACH STATEMENT EXECUTE FUNCTION clawtower_append_only();
INSERT INTO clawtower_meta VALUES ('application', 'clawtower');
INSERT INTO clawtower_meta VALUES ('schema_version', '{LATEST_VERSION}');
"""


class _Retry(Exception):
    """The connection was lost before COMMIT: nothing landed; run the batch again."""


class _CommitUnknown(Exception):
    """The connection was lost during COMMIT: look in the log before running it again."""

    def __init__(self, result: BatchResult, first: tuple[StoredEvent, str] | None) -> None:
        super().__init__("commit outcome unknown")
        self.result = result
        self.first = first


def _lost(exc: BaseException) -> bool:
    """A lost or unusable connection (retry), as opposed to a refused statement."""
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and not isinstance(
        exc, psycopg.errors.QueryCanceled | psycopg.errors.LockNotAvailable)


class PostgresStore(BatchWriter, LogReads):
    """The shared store. Create with `await open_postgres(url)`."""

    def __init__(self, url: str, clock: Clock) -> None:
        self.url = url
        self.path = redact(url)
        self.clock = clock
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="clawtower-pg")
        self._pg: psycopg.Connection[Any] | None = None  # the pool thread's connection
        # the replica: in memory until `_init` attaches this process's (core/store/replica.py)
        self._replica = sqlite3.connect(":memory:", check_same_thread=False)
        self._slot: Slot | None = None
        self._attached = False
        self._saved = 0  # the seq of the slot's snapshot
        self._applied = 0  # the replica's last seq (pool thread only)
        self._down_until = 0.0  # reads skip catching up until then (server unreachable)
        self._init_writer_state()
        self._listener_task: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()  # set while LISTEN is live (tests, benchmarks)
        self.retries = 0
        self.replayed = 0  # events applied to the replica from the log (the open's catch-up)
        self.kept_seq = 0  # the seq the replica kept from an earlier open started at

    # ------------------------------------------------------------------ lifecycle

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise StoreClosed("the store is closed")
        return await self._call(fn, *args)

    async def _open(self, timeout_s: float) -> None:
        try:
            await self._init_retrying(timeout_s)
        except BaseException:
            await self._call(self._shutdown)
            self._pool.shutdown(wait=False)
            raise
        self._last_seq = self._applied
        self._start_writer("clawtower-pg-writer")
        self._listener_task = asyncio.create_task(self._listen(), name="clawtower-pg-listen")

    async def _init_retrying(self, timeout_s: float) -> None:
        """Open across a server that is down or restarting: retry the connection with a
        bounded backoff (0.05 s doubling to 1 s) for `timeout_s`, then fail naming the last
        error. A refusal from a live server (not a store, a newer schema) fails at once."""
        deadline = time.monotonic() + timeout_s
        pause, attempts = 0.05, 0
        while True:
            attempts += 1
            try:
                await self._call(self._connect)
            except StoreError as exc:
                if time.monotonic() + pause > deadline:
                    raise StorageFault(self.path, UNREACHABLE, f"{getattr(exc, 'detail', exc)};"
                                       f" gave up after {attempts} attempt(s) over"
                                       f" {timeout_s:g} s", "cannot connect") from None
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            try:
                await self._call(self._init)
                return
            except StoreError:
                if self._pg is not None and not self._pg.broken and not self._pg.closed:
                    raise  # the server answered and refused: no point retrying
                if time.monotonic() + pause > deadline:
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)

    def _connect(self) -> psycopg.Connection[Any]:
        if self._pg is not None and not self._pg.closed and not self._pg.broken:
            return self._pg
        if self._pg is not None:
            with contextlib.suppress(Exception):
                self._pg.close()
            self._pg = None
        try:
            self._pg = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise StorageFault(self.path, UNREACHABLE, first_line(exc),
                               "cannot connect") from None
        return self._pg

    def _init(self) -> None:
        """Create the log tables (once, under the lock) or refuse a newer store; catch up."""
        pg = self._connect()
        try:
            with pg.transaction():
                pg.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
                exists = pg.execute("SELECT to_regclass('clawtower_meta') IS NOT NULL").fetchone()
                if exists is None or not exists[0]:
                    if pg.execute("SELECT to_regclass('clawtower_events')").fetchone() != (None,):
                        raise StoreError(f"{self.path}: not a clawtower store (a clawtower_events"
                                         " table without clawtower_meta)")
                    pg.execute(PG_SCHEMA)
                row = pg.execute(
                    "SELECT value FROM clawtower_meta WHERE key='schema_version'").fetchone()
                version = int(row[0]) if row else 0
                if version > LATEST_VERSION:
                    raise StoreError(
                        f"{self.path}: written by a newer clawtower (schema v{version}; this"
                        f" build reads up to v{LATEST_VERSION}); upgrade clawtower")
                if version < LATEST_VERSION:
                    pg.execute("UPDATE clawtower_meta SET value=%s WHERE key='schema_version'",
                               (str(LATEST_VERSION),))
                # the migration ledger (what this build knows, recorded once each; tables
                # besides the log live in each process's replica, migrated by its build)
                now = time.time()
                for v, script in MIGRATIONS:
                    pg.execute("INSERT INTO clawtower_meta VALUES (%s, %s) ON CONFLICT (key)"
                               " DO NOTHING", (f"migration:{v:04d}", json.dumps({
                                   "version": v, "name": migration_name(v),
                                   "checksum": migration_checksum(script),
                                   "applied_at": now})))
                # the store's identity (a store from before it gets one now): a replica kept
                # for another database under the same URL is never reused
                pg.execute("INSERT INTO clawtower_meta VALUES ('store_id', %s)"
                           " ON CONFLICT (key) DO NOTHING", (uuid.uuid4().hex,))
                row = pg.execute(
                    "SELECT value FROM clawtower_meta WHERE key='store_id'").fetchone()
                store_id = str(row[0]) if row else ""
        except psycopg.Error as exc:
            raise self._write_error(exc, "cannot open store") from None
        if not self._attached:
            self._attach_replica(store_id)
        self._catch_up()
        self._snapshot()

    def _attach_replica(self, store_id: str) -> None:
        """This process's replica: its slot's last snapshot, caught up from where it was
        left (or dropped when it does not match the log); empty when no slot can be had."""
        root = replica_root()
        slot = Slot.take(root, self.url, store_id, self.path) if root is not None else None
        conn, applied = memory_replica(), 0
        if slot is not None:
            loaded = slot.load()
            seq = int(loaded.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])
            if seq and not self._matches(loaded, seq):
                loaded.close()
                slot.discard()
            else:
                conn.close()
                conn, applied = loaded, seq
        self._replica.close()
        self._replica, self._slot, self._applied = conn, slot, applied
        self.kept_seq = self._saved = applied
        self._attached = True

    def _snapshot(self, force: bool = False) -> None:
        """Save the replica to its slot (pool thread) every SNAPSHOT_EVERY events, or now."""
        if self._slot is None or self._applied == self._saved:
            return
        if not force and self._applied - self._saved < replica_mod.SNAPSHOT_EVERY:
            return
        try:
            self._slot.save(self._replica)
            self._saved = self._applied
        except (OSError, sqlite3.Error):
            pass  # a cache: the next open replays a little more

    def _matches(self, replica: sqlite3.Connection, seq: int) -> bool:
        """Is the replica's event at `seq` the log's? (A restored or recreated log is not.)"""
        mine = replica.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE seq=?",
                               (seq,)).fetchone()
        theirs = self._connect().execute(
            f"SELECT {EVENT_COLUMNS} FROM clawtower_events WHERE seq=%s", (seq,)).fetchone()
        return theirs is not None and mine is not None and tuple(theirs) == tuple(mine)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._stop_writer()
        if self._listener_task is not None:
            self._listener_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener_task
        await self._call(self._shutdown)
        self._pool.shutdown(wait=True)

    def _shutdown(self) -> None:
        if self._pg is not None:
            with contextlib.suppress(Exception):
                self._pg.close()
            self._pg = None
        if self._attached:
            self._snapshot(force=True)
        self._replica.close()
        if self._slot is not None:
            self._slot.close()
            self._slot = None

    async def __aenter__(self) -> PostgresStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ replica

    def _catch_up(self) -> int:
        """Apply every logged event after the replica's last one (pool thread)."""
        pg = self._connect()
        while True:
            rows = pg.execute(
                f"SELECT {EVENT_COLUMNS} FROM clawtower_events WHERE seq > %s ORDER BY seq"
                " LIMIT %s", (self._applied, CATCH_UP_CHUNK)).fetchall()
            if not rows:
                return self._applied
            self._apply_rows(rows)
            if len(rows) < CATCH_UP_CHUNK:
                return self._applied

    def _apply_rows(self, rows: Sequence[Sequence[Any]]) -> None:
        r = self._replica
        r.execute("BEGIN IMMEDIATE")
        try:
            for row in rows:
                r.execute(f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
                          tuple(row))
                projections.apply(r, event_of_row(row))
            r.execute("COMMIT")
        except BaseException:
            r.execute("ROLLBACK")
            raise
        self._applied = int(rows[-1][0])
        self.replayed += len(rows)

    def _fresh(self) -> None:
        """Catch up for a read; without the server, answer from what this process saw (and
        try again only after a pause: a read never waits out a connect timeout twice)."""
        if time.monotonic() < self._down_until:
            return
        try:
            self._catch_up()
        except (StoreError, psycopg.OperationalError, psycopg.InterfaceError):
            self._down_until = time.monotonic() + 0.5
            return
        self._snapshot()  # outside the writers' lock: a snapshot never holds it

    # ------------------------------------------------------------------ writing

    def _describe(self, exc: Exception) -> str:
        return first_line(exc)

    def _write_error(self, exc: psycopg.Error, what: str = "write failed") -> StoreError:
        """A refused statement as its caller sees it: the server's storage faults (disk full,
        read-only after a fail-over, I/O) with their cause, anything else as refused."""
        cause = cause_of(exc)
        if cause is None:
            return StoreError(f"{self.path}: {what} ({first_line(exc)})")
        if cause == READ_ONLY and self._pg is not None:  # a standby now: connect afresh
            with contextlib.suppress(Exception):
                self._pg.close()
        return StorageFault(self.path, cause, first_line(exc))

    async def _write_batch(self, jobs: list[Job]) -> BatchResult:
        """Run the batch; across a lost connection, wait for the server and run it again
        (or, when its COMMIT was cut off and it landed, answer with what it returned)."""
        deadline = time.monotonic() + RECONNECT_S
        pause = 0.05
        while True:
            try:
                return await self._call(self._run_batch, jobs)
            except _Retry as lost:
                cause = lost.__cause__ or lost
                self._faulted(UNREACHABLE, cause)
                # nothing ran: while an engine holds, or when a write must answer (a
                # webhook's intake), the writer retries it (`_land`: backoff, and what queued
                # behind joins the next try, so that write is answered, not kept waiting)
                if self._holding() or any(j.hold is False for j in jobs):
                    raise StorageFault(self.path, UNREACHABLE, first_line(cause)) from None
            except _CommitUnknown as unknown:
                self._faulted(UNREACHABLE, unknown.__cause__ or unknown)
                first, result = unknown.first, unknown.result
                if await self._until_back(deadline, partial(self._landed, first)):
                    return result
            self.retries += 1
            await self._until_back(deadline, lambda: self._connect() is not None)
            await asyncio.sleep(min(pause, 1.0))
            pause *= 2

    async def _until_back(self, deadline: float, probe: Callable[[], bool]) -> bool:
        pause = 0.05
        while True:
            try:
                return await self._call(probe)
            except (StoreError, psycopg.OperationalError, psycopg.InterfaceError) as exc:
                # an engine holds on: wait for the server as long as it does (a batch whose
                # COMMIT was cut off must be found landed or not, never written twice)
                if time.monotonic() > deadline and not self._holding():
                    raise StorageFault(self.path, UNREACHABLE, f"for {RECONNECT_S:.0f} s:"
                                       f" {first_line(exc)}") from None
                # what queued behind and must answer (a webhook's intake) is answered now
                self._refuse_impatient(StorageFault(self.path, UNREACHABLE, first_line(exc)))
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)

    def _landed(self, first: tuple[StoredEvent, str] | None) -> bool:
        """Did the batch whose COMMIT was cut off land? Its first event says so."""
        if first is None:
            return False  # it wrote nothing: running it again is harmless
        event, text = first
        pg = self._connect()
        row = pg.execute("SELECT ts, actor, type, payload FROM clawtower_events WHERE seq=%s",
                         (event.seq,)).fetchone()
        mine = (event.ts, event.actor, event.type, text)
        if row is not None and tuple(row) == mine:
            self._catch_up()
            return True
        return False

    def _run_batch(self, jobs: list[Job]) -> BatchResult:
        """Pool thread: lock, catch up, run each command in a replica savepoint, log, commit."""
        try:
            pg = self._connect()
        except StoreError as exc:  # the server is away: wait for it, as for a cut-off batch
            raise _Retry() from exc
        r = self._replica
        now = self.clock.now()
        replica_open = False
        try:
            # Round trips are the cost beside the commit's fsync: a batch takes two. The
            # first (one simple query) begins, takes the lock and reads what the replica
            # lacks; the second (one pipeline) inserts the events, notifies and commits.
            cur = pg.cursor()
            cur.execute(
                f"BEGIN; SELECT pg_advisory_xact_lock({LOCK_KEY:d}); SELECT {EVENT_COLUMNS}"
                f" FROM clawtower_events WHERE seq > {self._applied:d} ORDER BY seq"
                f" LIMIT {CATCH_UP_CHUNK:d}".encode())
            cur.nextset()
            cur.nextset()
            missed = cur.fetchall()
            if missed:
                self._apply_rows(missed)
                if len(missed) >= CATCH_UP_CHUNK:
                    self._catch_up()
            r.execute("BEGIN IMMEDIATE")
            replica_open = True
            result = run_commands(r, jobs, now, self.path, self._columns)
            emitted, texts = result.emitted, result.texts
            rows = [(e.seq, e.ts, e.entity, e.entity_id, e.type, e.actor, e.role, text,
                     e.idem_key) for e, text in zip(emitted, texts, strict=True)]
        except BaseException as exc:
            if replica_open:
                r.execute("ROLLBACK")
            with contextlib.suppress(Exception):
                pg.execute("ROLLBACK")
            if _lost(exc):
                raise _Retry() from exc
            if isinstance(exc, psycopg.Error):
                raise self._write_error(exc) from None
            raise
        try:
            if rows:  # one pipeline: the INSERTs (prepared), the NOTIFY and the COMMIT
                with pg.pipeline(), pg.cursor() as cur:
                    cur.executemany(INSERT_EVENTS, rows)
                    cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, str(emitted[-1].seq)))
                    cur.execute("COMMIT")
            else:
                pg.execute("COMMIT")
        except BaseException as exc:
            r.execute("ROLLBACK")
            if _lost(exc):  # cut off before or during its COMMIT: the log tells which
                raise _CommitUnknown(
                    result, (emitted[0], texts[0]) if emitted else None) from exc
            with contextlib.suppress(Exception):  # a refused INSERT: nothing landed
                pg.execute("ROLLBACK")
            if isinstance(exc, psycopg.Error):
                raise self._write_error(exc) from None
            raise
        r.execute("COMMIT")
        if emitted:
            self._applied = emitted[-1].seq
            self._snapshot()
        return result

    # ------------------------------------------------------------------ reading

    def _query(self, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        self._fresh()
        cur = self._replica.execute(sql, params)
        if cur.description is None:
            return []
        return [dict_factory(cur, row) for row in cur.fetchall()]

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return await self._read(self._query, sql, params)

    async def fetch_many(
        self, queries: Sequence[tuple[str, Sequence[Any]]]
    ) -> list[list[dict[str, Any]]]:
        def run() -> list[list[dict[str, Any]]]:
            self._fresh()
            out = []
            for sql, params in queries:
                cur = self._replica.execute(sql, params)
                out.append([dict_factory(cur, row) for row in cur.fetchall()])
            return out

        return await self._read(run)

    # ------------------------------------------------------------------ wake-ups

    async def _listen(self) -> None:
        """LISTEN for other processes' commits; reconnect (and look once) after a loss."""
        pause = 0.05
        while not self._closed:
            try:
                async with await psycopg.AsyncConnection.connect(
                        self.url, autocommit=True, connect_timeout=10) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    cur = await conn.execute("SELECT coalesce(max(seq), 0) FROM clawtower_events")
                    row = await cur.fetchone()
                    self._saw(int(row[0]) if row else 0)
                    self.listening.set()
                    pause = 0.05
                    async for note in conn.notifies():
                        with contextlib.suppress(ValueError):
                            self._saw(int(note.payload))
            except asyncio.CancelledError:
                raise
            except Exception:
                self.listening.clear()
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)

    async def wait_for_change(self, after_seq: int, timeout: float) -> int:
        """Return the newest seq once it passes `after_seq` (own commits and NOTIFYs from
        other processes wake waiters at once), or the newest known on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if self._last_seq > after_seq:
                return self._last_seq
            remaining = deadline - loop.time()
            if remaining <= 0:
                return self._last_seq
            changed = self._changed
            if self._last_seq > after_seq:
                continue
            await wait_event(changed, remaining)

    # ------------------------------------------------------------------ replay

    def _verify(self) -> list[str]:
        self._catch_up()
        problems = []
        theirs = self._log_digest_pg()
        mine = log_digest_rows(self._replica.execute(
            f"SELECT {EVENT_COLUMNS} FROM events ORDER BY seq").fetchall())
        if theirs != mine:
            problems.append(f"events: the local replica ({mine[0]} events) differs from the"
                            f" log in PostgreSQL ({theirs[0]} events)")
        return problems + verify_connection(self._replica)

    def _log_digest_pg(self) -> tuple[int, str]:
        rows = self._connect().execute(
            f"SELECT {EVENT_COLUMNS} FROM clawtower_events ORDER BY seq").fetchall()
        return log_digest_rows(rows)

    async def migrations(self) -> list[dict[str, Any]]:
        """The migration ledger kept in clawtower_meta (oldest first)."""
        def read() -> list[dict[str, Any]]:
            rows = self._connect().execute(
                "SELECT value FROM clawtower_meta WHERE key LIKE 'migration:%' ORDER BY key"
            ).fetchall()
            return [dict(json.loads(r[0])) for r in rows]

        return await self._read(read)

    async def verify_projections(self) -> list[str]:
        """Replay the log into fresh projections and compare them with this process's
        replica (and the replica's copy of the log with PostgreSQL's)."""
        return await self._read(self._verify)

    async def log_digest(self) -> tuple[int, str]:
        """(events, sha256 over every event) of the log in PostgreSQL."""
        return await self._read(self._log_digest_pg)

    async def rebuild_projections(self) -> int:
        """Throw the replica away and rebuild it from the log."""

        def rebuild() -> int:
            old = self._replica
            self._replica, self._applied = memory_replica(), 0
            try:
                self._catch_up()
            except BaseException:
                self._replica.close()
                self._replica, self._applied = old, int(
                    old.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])
                raise
            old.close()
            if self._slot is not None:  # the old snapshot is what was thrown away
                self._slot.discard()
                self._saved = 0
                self._snapshot(force=True)
            return self._applied

        return await self._read(rebuild)


def log_digest_rows(rows: Sequence[Sequence[Any]]) -> tuple[int, str]:
    h = hashlib.sha256()
    for row in rows:
        h.update(repr(tuple(row)).encode())
    return len(rows), h.hexdigest()


def open_timeout() -> float:
    try:
        return max(0.0, float(os.environ.get("CLAWTOWER_DB_OPEN_TIMEOUT", OPEN_TIMEOUT_S)))
    except ValueError:
        return OPEN_TIMEOUT_S


async def open_postgres(url: str, *, clock: Clock | None = None,
                        timeout_s: float | None = None) -> PostgresStore:
    """Open (creating the log tables on first use) the store in the database at `url`,
    waiting up to `timeout_s` (default `open_timeout()`) for a server that is down."""
    store = PostgresStore(url, clock or SystemClock())
    await store._open(open_timeout() if timeout_s is None else timeout_s)
    return store
