"""The PostgreSQL store's local replica, kept in a file between runs so opening is incremental.

Why: every process answers reads and runs commands against a SQLite replica of the
projections (core/store/postgres.py). Rebuilt in memory at every open, opening cost a replay
of the whole log (grows with it). Kept in a file, a process reopens the replica it left and
catches up only the events logged since its last seq.

- The files live under CLAWTOWER_REPLICA_DIR (default $CLAWTOWER_HOME/replicas), in a folder
  per store: a hash of the URL and of the store's id (a random id kept in PostgreSQL, so a
  database dropped and created again under the same URL never meets an old replica).
- A replica is written by one process at a time: each process takes the first free slot
  (`slot-N.db`, held with an exclusive flock on `slot-N.lock` while it is open), so
  processes on one machine never share a replica, and a finished process's slot, with its
  replica, is reused by the next one.
- A replica is a cache: one written by another build's schema, or whose last event is not
  the log's event at that seq, is thrown away and rebuilt from the log.
- CLAWTOWER_REPLICA_DIR=":memory:" (or empty) keeps the replica in memory (replay at open).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sqlite3
from pathlib import Path

from ..config import home
from .schema import LATEST_VERSION
from .sqlite import check_and_migrate

MAX_SLOTS = 64


def replica_root() -> Path | None:
    """Where replicas are kept, or None to keep them in memory."""
    raw = os.environ.get("CLAWTOWER_REPLICA_DIR")
    if raw is not None:
        return None if raw.strip() in ("", ":memory:") else Path(raw).expanduser()
    return home() / "replicas"


def _boot_id() -> str:
    """This boot of the machine (Linux), or a constant where unknown."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def memory_replica() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    check_and_migrate(conn, ":memory:")  # whatever migrations this build has
    return conn


class Slot:
    """One process's replica file, held (flock) until `close`."""

    def __init__(self, folder: Path, n: int, fd: int) -> None:
        self.folder, self.n, self._fd = folder, n, fd
        self.path = folder / f"slot-{n}.db"

    @staticmethod
    def take(root: Path, url: str, store_id: str, label: str) -> Slot | None:
        """The first free slot of this store's folder; None when all are taken (or the
        folder cannot be made: the replica then lives in memory)."""
        key = hashlib.sha256(f"{url}\n{store_id}".encode()).hexdigest()[:24]
        folder = root / key
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            (folder / "store.txt").write_text(f"{label}\n{store_id}\n")
        except OSError:
            return None
        for n in range(MAX_SLOTS):
            try:
                fd = os.open(folder / f"slot-{n}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            except OSError:
                return None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            return Slot(folder, n, fd)
        return None

    def open(self) -> sqlite3.Connection:
        """The replica file, created or reused; a file of another schema version (or not a
        replica at all), or one left open when the machine went down, is thrown away first."""
        state = self.folder / f"slot-{self.n}.open"
        try:
            left_open_by = state.read_text().strip()
        except OSError:
            left_open_by = None
        boot = _boot_id()
        if left_open_by is not None and (left_open_by != boot or boot == "unknown"):
            self.discard()  # written without fsyncs and the OS went down: maybe torn
        state.write_text(boot)
        conn = self._connect()
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, LATEST_VERSION):
                raise sqlite3.DatabaseError(f"schema v{version}")
            check_and_migrate(conn, str(self.path))
        except Exception:
            conn.close()
            self.discard()
            conn = self._connect()
            check_and_migrate(conn, str(self.path))
        return conn

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        # a cache: no fsync at all (they cost 4x the replica's write). A killed process
        # loses nothing (the OS has the pages); after an OS crash the file may be torn, so
        # a replica left open in an earlier boot is thrown away (`open`)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-65536")
        return conn

    def discard(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.path}{suffix}")

    def close(self) -> None:
        """After the replica's connection is closed: the file is whole again."""
        with contextlib.suppress(OSError):
            (self.folder / f"slot-{self.n}.open").unlink()
        with contextlib.suppress(OSError):
            os.close(self._fd)  # releases the flock: the slot is free for the next process
