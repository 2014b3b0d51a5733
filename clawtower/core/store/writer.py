"""The write path both stores share: one queue, one writer task, group commit.

Why one module: the SQLite store and the PostgreSQL store (whose commands run on a local
SQLite replica) must keep the same contract, so they run the same code for it:
- commands queue in order; the writer task drains up to MAX_BATCH of them into one batch;
- each command runs in its own SAVEPOINT on a SQLite connection, so one failing command is
  rolled back alone and never poisons the others; a deferred error keeps the command's
  records (a refusal record) yet fails its caller;
- callers are answered only after the store's COMMIT: an acknowledged write is durable.
Each store supplies only how a batch is written and committed (`_write_batch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..aio import wait_event
from ..errors import ClawError, StorageFault, StoreClosed, StoreError
from .faults import Backoff, Fault, cause_of
from .interface import Command

if TYPE_CHECKING:  # the models and projections load with the first write (start-up)
    from ..events import NewEvent, StoredEvent

T = TypeVar("T")

MAX_BATCH = 512


def dict_factory(cursor: sqlite3.Cursor, row: Sequence[Any]) -> dict[str, Any]:
    return {d[0]: v for d, v in zip(cursor.description, row, strict=True)}


class Tx:
    """The WriteTx handed to commands; lives on the writer thread only."""

    def __init__(self, conn: sqlite3.Connection, now: float,
                 columns: dict[str, tuple[str, ...]] | None = None,
                 memo: dict[str, dict[Hashable, Any]] | None = None) -> None:
        self.conn = conn
        self.now = now
        self.deferred: Exception | None = None
        self.emitted: list[StoredEvent] = []
        self.payload_json: list[str] = []  # as logged, one per emitted event
        # column names of each read's statement, kept by the writer (`run_commands`): building
        # them from `cursor.description` per row cost ~1 µs a row on the writer thread
        self._columns: dict[str, tuple[str, ...]] = {} if columns is None else columns
        # values derived from rows, per entity, shared by the batch's commands (`cached`)
        self._memo: dict[str, dict[Hashable, Any]] = {} if memo is None else memo

    def import_event(self, event: StoredEvent, payload_json: str) -> None:
        """Log `event` verbatim (its seq, time and payload text) and project it: `store
        copy` moves a log between stores without re-dating or re-encoding anything."""
        self.conn.execute(
            "INSERT INTO events (seq, ts, entity, entity_id, type, actor, role, payload,"
            " idem_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (event.seq, event.ts, event.entity, event.entity_id, event.type, event.actor,
             event.role, payload_json, event.idem_key),
        )
        _models().apply(self.conn, event)
        self._memo.clear()
        self.emitted.append(event)
        self.payload_json.append(payload_json)

    def emit(self, event: NewEvent) -> StoredEvent:
        # The payload was validated when the caller built it (pydantic, at the boundary):
        # here it is only encoded once, logged and projected. The encoding refuses what the
        # log could not replay (NaN, ±Infinity: storable.py), and a projection's overflow
        # (an integer too large for its column) is the same refusal: the command's
        # savepoint rolls back whatever it wrote.
        m = _models()
        payload = event.payload
        payload_json = m.encode(payload)
        entity, type_, now = payload.ENTITY, payload.TYPE, self.now
        cur = self.conn.execute(_INSERT_EVENT, (
            now, entity, event.entity_id, type_, event.actor, event.role, payload_json,
            event.idem_key))
        stored = m.StoredEvent(
            seq=cur.lastrowid or 0, ts=now, entity=entity, entity_id=event.entity_id,
            type=type_, actor=event.actor, role=event.role, payload=payload,
            idem_key=event.idem_key,
        )
        try:
            m.apply(self.conn, stored)
        except OverflowError as exc:
            raise m.overflow(payload, exc) from None
        if entity in self._memo:  # this batch changed what was cached from entity's rows
            del self._memo[entity]
        self.emitted.append(stored)
        self.payload_json.append(payload_json)
        return stored

    def cached(self, entity: str, key: Hashable, load: Callable[[], T]) -> T:
        """`load()` once per batch for `key`: a value derived only from the projections of
        `entity`'s events (an agent spec, whether a namespace holds memories). Any event of
        `entity` written in the batch, or a command rolled back, drops the entity's values,
        so a cached read never misses a write; the next batch starts empty (another process
        may have written between). Why: a fan-out's commands read the same spec row and
        probe the same namespaces once per child, and each statement costs ~5 µs here."""
        values = self._memo.setdefault(entity, {})
        if key in values:
            return values[key]  # type: ignore[no-any-return]
        value = values[key] = load()
        return value

    def _names(self, sql: str, cur: sqlite3.Cursor, width: int) -> tuple[str, ...]:
        names = self._columns.get(sql)
        if names is None or len(names) != width:  # first use, or the table gained columns
            names = self._columns[sql] = tuple(d[0] for d in cur.description)
        return names

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        cur = self.conn.execute(sql, params)
        row = cur.fetchone()
        cur.close()
        return None if row is None else dict(zip(self._names(sql, cur, len(row)), row,
                                                 strict=True))

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cur = self.conn.execute(sql, params)
        rows = cur.fetchall()
        if not rows:
            return []
        names = self._names(sql, cur, len(rows[0]))
        return [dict(zip(names, r, strict=True)) for r in rows]

    def defer_error(self, error: Exception) -> None:
        self.deferred = error


_INSERT_EVENT = ("INSERT INTO events (ts, entity, entity_id, type, actor, role, payload,"
                 " idem_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")


class _Models:
    """The event model and the projections, imported with the first write (start-up) and
    then looked up once per event instead of an import statement per call."""

    def __init__(self) -> None:
        from ..events import StoredEvent
        from .projections import apply
        from .storable import encode, overflow

        self.StoredEvent = StoredEvent
        self.apply = apply
        self.encode = encode
        self.overflow = overflow


_MODELS: _Models | None = None


def _models() -> _Models:
    global _MODELS
    if _MODELS is None:
        _MODELS = _Models()
    return _MODELS


@dataclass
class Job:
    command: Command[Any]
    future: asyncio.Future[Any]
    hold: bool | None = None  # on a storage fault: wait for the storage (None: the store's rule)
    #: the caller of `execute`, answered in the same step as `future`; cancelling it (the
    #: caller was cancelled) never touches `future`, so the command still commits whole
    waiter: asyncio.Future[Any] | None = None

    def answer(self, ok: bool, value: Any) -> None:
        for fut in (self.future, self.waiter):
            if fut is None or fut.done():
                continue
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)


@dataclass
class BatchResult:
    outcomes: list[tuple[bool, Any]] = field(default_factory=list)
    last_seq: int = 0
    emitted: list[StoredEvent] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # each emitted event's payload as logged


COLUMNS_KEPT = 4096  # statements whose column names a writer keeps (some are built per call)


def run_commands(
    conn: sqlite3.Connection, jobs: list[Job], now: float, path: str,
    columns: dict[str, tuple[str, ...]] | None = None,
) -> BatchResult:
    """Run each job's command in its own savepoint inside the caller's open transaction.
    `columns`: the writer's column names per statement, kept across its batches (a gate's
    round trip is a batch of one or two commands: a cache per batch missed every read)."""
    result = BatchResult()
    if columns is None:
        columns = {}
    elif len(columns) > COLUMNS_KEPT:
        columns.clear()
    memo: dict[str, dict[Hashable, Any]] = {}
    for job in jobs:
        tx = Tx(conn, now, columns, memo)
        conn.execute("SAVEPOINT cmd")
        try:
            value = job.command(tx)
        except Exception as exc:
            if cause_of(exc) is not None and not isinstance(exc, ClawError):
                raise  # the storage failed, not the command: the whole batch rolls back
            memo.clear()  # values read after the command's own writes are void with them
            conn.execute("ROLLBACK TO cmd")
            conn.execute("RELEASE cmd")
            result.outcomes.append((False, wrap_error(exc, path)))
            continue
        conn.execute("RELEASE cmd")
        result.outcomes.append(
            (False, tx.deferred) if tx.deferred is not None else (True, value))
        result.emitted.extend(tx.emitted)
        result.texts.extend(tx.payload_json)
    if result.emitted:
        result.last_seq = result.emitted[-1].seq
    return result


def wrap_error(exc: Exception, path: str) -> Exception:
    """A command's exception as its caller sees it: our own errors as they are, SQLite's
    as a StoreError naming the store."""
    if isinstance(exc, ClawError):
        return exc
    if isinstance(exc, sqlite3.IntegrityError) and "idem_key" in str(exc):
        return StoreError(f"{path}: duplicate idempotency key ({exc})")
    if isinstance(exc, sqlite3.Error):
        return StoreError(f"{path}: write failed ({exc})")
    return exc


def first_line(exc: BaseException) -> str:
    """The first line of what `exc` says; for a StorageFault, what the storage said (its
    detail), so a fault passed on is never nested in its own message."""
    if isinstance(exc, StorageFault) and exc.detail:
        return exc.detail
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _consume_outcome(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


class BatchWriter(ABC):
    """The queue, the writer task and the wake-up of waiters, for a store to inherit.

    A subclass calls `_init_writer_state()` in its constructor, `_start_writer()` once open,
    `_stop_writer()` when closing, and implements `_write_batch`."""

    path: str

    def _init_writer_state(self) -> None:
        #: while True (an engine runs on this store: core/workers.py), a batch that fails for
        #: a reason of the storage is retried until it lands; else its callers get the fault
        self.hold_on_fault = False
        self.fault: Fault | None = None  # the storage fault now, None once a batch lands
        self.fault_listeners: list[Callable[[Fault | None], None]] = []
        self._release = asyncio.Event()  # set: stop holding (closing, or hold turned off)
        self._stop_seen = False  # the stop marker was taken into a batch: end after it
        self._queue: asyncio.Queue[Job | None] = asyncio.Queue()
        self._writer_task: asyncio.Task[None] | None = None
        self._closed = False
        self._last_seq = 0
        # Broadcast without locks: waiters await the current Event; a change sets it and
        # installs a fresh one. (Condition.wait under wait_for could hang on cancellation.)
        self._changed = asyncio.Event()
        self.batches = 0
        self.commands = 0
        # the writer's column names per read statement (`run_commands`), for its lifetime:
        # a table only gains columns while a process runs, and Tx._names checks the width
        self._columns: dict[str, tuple[str, ...]] = {}

    # ------------------------------------------------------------------ to supply

    @abstractmethod
    async def _write_batch(self, jobs: list[Job]) -> BatchResult:
        """Run `jobs` (see `run_commands`) and commit them; raise if nothing landed."""

    def _describe(self, exc: Exception) -> str:
        """How a failed batch's exception reads in the callers' StoreError."""
        return str(exc)

    def _committed(self, result: BatchResult) -> None:  # noqa: B027 (optional hook)
        """Called after each committed batch, once callers are answered; nothing by default."""

    # ------------------------------------------------------------------ writing

    async def execute(self, command: Command[T], *, hold: bool | None = None) -> T:
        """Run `command` in a write transaction (batched with others); return its result.
        `hold=False`: on a storage fault fail at once, even while an engine holds the store
        (a webhook must answer, not wait for the disk)."""
        # As if shielded: a cancelled caller never cancels a command mid-transaction; the
        # command either commits whole or not at all. The caller waits on a future of its
        # own that the writer answers directly (asyncio.shield answered it one loop
        # iteration later, through a callback: issue 36).
        job = self._enqueue(command, hold)
        waiter: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        waiter.add_done_callback(_consume_outcome)
        job.waiter = waiter
        return await waiter

    def set_hold(self, hold: bool) -> None:
        """Hold faulted writes until they land (True), or fail them with the fault (False:
        the writes waiting now fail at once, so a stopping engine never hangs on a disk)."""
        self.hold_on_fault = hold
        if hold:
            self._release = asyncio.Event()
        else:
            self._release.set()

    def submit(self, command: Command[T], *, hold: bool | None = None) -> asyncio.Future[T]:
        """Queue `command` now, in order with every later write, without waiting for it.

        For progress records nothing waits on (a step started): they ride in the same
        batch as the next write, and are durable once any later `execute` has returned."""
        return self._enqueue(command, hold).future

    def _enqueue(self, command: Command[Any], hold: bool | None) -> Job:
        if self._closed:
            raise StoreClosed("the store is closed")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        # If nobody awaits the outcome, retrieve it so a failed command does not log
        # "Future exception was never retrieved".
        fut.add_done_callback(_consume_outcome)
        job = Job(command, fut, hold)
        self._queue.put_nowait(job)  # unbounded: never blocks
        return job

    async def append(self, events: Sequence[NewEvent]) -> list[int]:
        """Append pre-validated events atomically. Returns their sequence numbers."""
        evs = list(events)

        def command(tx: Any) -> list[int]:
            return [tx.emit(e).seq for e in evs]

        return await self.execute(command)

    def _start_writer(self, name: str) -> None:
        self._writer_task = asyncio.create_task(self._writer_loop(), name=name)

    async def _stop_writer(self) -> None:
        """Let the writer finish every queued command, then end it."""
        self.set_hold(False)  # writes held on a storage fault fail now: closing never hangs
        if self._writer_task is not None:
            await self._queue.put(None)
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer_task

    async def _writer_loop(self) -> None:
        while not self._stop_seen:
            job = await self._queue.get()
            if job is None:
                break
            jobs = [job]
            self._absorb(jobs)  # up to MAX_BATCH of what is queued: one batch
            result = await self._land(jobs)
            if result is None:
                continue
            self.batches += 1
            self.commands += len(jobs)
            for j, (ok, value) in zip(jobs, result.outcomes, strict=True):
                j.answer(ok, value)
            if result.last_seq > self._last_seq:
                self._last_seq = result.last_seq
                self._notify_change()
            self._committed(result)

    async def _land(self, jobs: list[Job]) -> BatchResult | None:
        """Write `jobs` as one batch. A storage fault rolls the whole batch back: the jobs
        that hold wait (backoff with jitter) and are written again, the others fail with the
        fault. Any other failure of the batch fails every job. None: nothing landed."""
        backoff = Backoff()
        while True:
            try:
                result = await self._write_batch(jobs)
            except Exception as exc:  # the COMMIT itself failed: nobody's write landed
                cause = cause_of(exc)
                if cause is None:
                    err = exc if isinstance(exc, ClawError) else StoreError(
                        f"{self.path}: write failed ({self._describe(exc)})")
                    self._fail(jobs, err)
                    return None
                self._faulted(cause, exc)
                held = [j for j in jobs if self._holds(j)]
                self._fail([j for j in jobs if not self._holds(j)],
                           StorageFault(self.path, cause, first_line(exc)))
                jobs[:] = held
                if not jobs:
                    return None
                await wait_event(self._release, backoff.next())
                self._absorb(jobs)  # what queued meanwhile joins the next try, in order
                continue
            if self.fault is not None:
                self.fault = None
                self._tell(None)
            return result

    def _absorb(self, jobs: list[Job]) -> None:
        """Move what is queued into the batch `jobs` (up to MAX_BATCH; the stop marker ends
        the writer after it). Behind a held batch: a job that does not hold (a webhook's
        intake) is then answered by the next try, not after the fault."""
        while len(jobs) < MAX_BATCH:
            try:
                nxt = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            if nxt is None:
                self._stop_seen = True
                return
            jobs.append(nxt)

    def _refuse_impatient(self, fault: StorageFault) -> None:
        """Answer the queued writes that must not wait (`hold=False`) with `fault`, while
        the batch ahead of them waits for the storage; the others keep their order."""
        kept: list[Job | None] = []
        while True:
            try:
                kept.append(self._queue.get_nowait())
            except asyncio.QueueEmpty:
                break
        for job in kept:
            if job is not None and job.hold is False:
                self._fail([job], fault)
            else:
                self._queue.put_nowait(job)

    def _holding(self) -> bool:
        """An engine holds this store's writes through storage faults, now."""
        return self.hold_on_fault and not self._release.is_set()

    def _holds(self, job: Job) -> bool:
        hold = self.hold_on_fault if job.hold is None else job.hold
        return hold and not self._release.is_set() and not job.future.done()

    @staticmethod
    def _fail(jobs: list[Job], err: Exception) -> None:
        for j in jobs:
            j.answer(False, err)

    def _faulted(self, cause: str, exc: BaseException) -> None:
        if self.fault is None or self.fault.cause != cause:
            self.fault = Fault(cause, first_line(exc), time.time())
            self._tell(self.fault)
        self.fault.retries += 1

    def _tell(self, fault: Fault | None) -> None:
        for listener in list(self.fault_listeners):
            with contextlib.suppress(Exception):
                listener(fault)

    # ------------------------------------------------------------------ wake-ups

    def _notify_change(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _saw(self, seq: int) -> None:
        """Another process committed up to `seq`: tell every waiter."""
        if seq > self._last_seq:
            self._last_seq = seq
            self._notify_change()
