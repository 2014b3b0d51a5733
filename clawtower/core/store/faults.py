"""Storage faults: telling "the storage cannot take a write" from "the work failed".

Why one module: a full disk, a read-only file or folder, an I/O error, a lost PostgreSQL
server or a lock that timed out is the infrastructure's fault, never the task's, step's,
node's, turn's or invocation's. The store's writer (writer.py) classifies every failed batch
here, and only here: a faulted batch rolls back whole; while an engine holds the store
(`hold_on_fault`) the writer retries it with a bounded, jittered backoff until it lands, so
every worker simply waits and resumes the same work; otherwise its callers get one
`StorageFault` naming the store and the cause (a command's exit 1: running it again is safe).
"""

from __future__ import annotations

import errno
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..errors import StorageFault

DISK_FULL = "disk full"
READ_ONLY = "read-only"
IO_ERROR = "I/O error"
LOCKED = "locked by another process (timed out)"
UNREACHABLE = "server unreachable"
CANNOT_OPEN = "cannot open its files"

_SQLITE = (
    ("SQLITE_FULL", DISK_FULL), ("SQLITE_READONLY", READ_ONLY), ("SQLITE_IOERR", IO_ERROR),
    ("SQLITE_BUSY", LOCKED), ("SQLITE_LOCKED", LOCKED), ("SQLITE_CANTOPEN", CANNOT_OPEN),
)
_SQLITE_TEXT = (  # SQLite's own messages, for errors that carry no error name
    ("database or disk is full", DISK_FULL), ("readonly database", READ_ONLY),
    ("disk i/o error", IO_ERROR), ("database is locked", LOCKED),
    ("unable to open database file", CANNOT_OPEN),
)
_ERRNO = {errno.ENOSPC: DISK_FULL, errno.EDQUOT: DISK_FULL, errno.EFBIG: DISK_FULL,
          errno.EROFS: READ_ONLY, errno.EACCES: READ_ONLY, errno.EPERM: READ_ONLY,
          errno.EIO: IO_ERROR}


def _pg_cause(exc: BaseException) -> str | None:
    """psycopg's errors by SQLSTATE, without importing psycopg (SQLite users lack it)."""
    module = type(exc).__module__
    if not module.startswith("psycopg"):
        return None
    state = getattr(exc, "sqlstate", None) or ""
    if state == "53100":
        return DISK_FULL
    if state == "25006":
        return READ_ONLY  # e.g. a fail-over left us on a standby
    if state.startswith("58"):
        return IO_ERROR
    if state == "55P03":
        return LOCKED
    if state.startswith(("08", "57P")) or (
            not state and type(exc).__name__ in ("OperationalError", "InterfaceError")):
        return UNREACHABLE
    return None


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """`exc`, then what it was raised from or while handling (at most 8 deep)."""
    seen = 0
    while exc is not None and seen < 8:
        seen += 1
        yield exc
        exc = exc.__cause__ or exc.__context__


def cause_of(exc: BaseException | None) -> str | None:
    """The storage cause of `exc` (or of an exception it was raised from), else None: a
    fault of the work (a refused command, a bug) is not the storage's."""
    for e in _chain(exc):
        if isinstance(e, StorageFault):
            return e.cause
        if isinstance(e, sqlite3.Error):
            name = getattr(e, "sqlite_errorname", "") or ""
            for prefix, cause in _SQLITE:
                if name.startswith(prefix):
                    return cause
            text = str(e).lower()
            for needle, cause in _SQLITE_TEXT:
                if needle in text:
                    return cause
            return None
        if isinstance(e, OSError) and e.errno in _ERRNO:
            return _ERRNO[e.errno]
        pg = _pg_cause(e)
        if pg is not None:
            return pg
    return None


def storage_fault(exc: BaseException | None) -> StorageFault | None:
    """The StorageFault `exc` is, or was raised from or while handling (a wrapper of it):
    the storage failed, not the work. Every protocol that turns an exception during work into
    a failure, an attempt or a dead letter asks this first and re-raises (or backs off and
    tries the same work again later): a storage fault is never recorded as the work's."""
    return next((e for e in _chain(exc) if isinstance(e, StorageFault)), None)


@dataclass
class Fault:
    """The store's current storage fault: what, since when (wall clock), how often retried."""

    cause: str
    detail: str
    since: float
    retries: int = 0

    def describe(self) -> str:
        """One line for `/health`, the console's header and a waiting command."""
        return f"{self.cause} since {time.strftime('%H:%M:%S', time.localtime(self.since))}," \
               " retrying"


class Backoff:
    """Bounded exponential backoff with jitter: `first` doubling to `cap` seconds, each
    pause drawn from its upper half, so processes sharing a store do not retry in step."""

    def __init__(self, first: float = 0.05, cap: float = 2.0,
                 rng: Callable[[], float] = random.random) -> None:
        self.first, self.cap, self.rng = first, cap, rng
        self.n = 0

    def next(self) -> float:
        base = min(self.cap, self.first * (2 ** min(self.n, 30)))
        self.n += 1
        return float(base * (0.5 + self.rng() / 2))


DRILL_ENV = "CLAWTOWER_DRILL_DISK_FULL"


class DiskFullDrill:
    """A full disk on demand, for the fault soak and the tests: while the file named by
    $CLAWTOWER_DRILL_DISK_FULL exists, the SQLite writer caps its database at its current
    size (`PRAGMA max_page_count`), so SQLite itself answers SQLITE_FULL to every write that
    needs a new page, as on a full disk; once the file is removed the cap is lifted. Costs
    one stat per batch, and nothing when the variable is unset."""

    NO_CAP = 4294967294

    def __init__(self, flag: str) -> None:
        self.flag = flag
        self.capped = False

    @classmethod
    def from_env(cls) -> DiskFullDrill | None:
        flag = os.environ.get(DRILL_ENV)
        return cls(flag) if flag else None

    def apply(self, conn: sqlite3.Connection) -> None:
        """On the writer thread, before a batch: cap or uncap as the flag file says."""
        full = os.path.exists(self.flag)
        if full and not self.capped:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count={int(pages)}")
        elif not full and self.capped:
            conn.execute(f"PRAGMA max_page_count={self.NO_CAP}")
        self.capped = full
