"""The PostgreSQL store's local replica, kept as a snapshot file so opening is incremental.

Why: every process answers reads and runs commands against a SQLite replica of the
projections (core/store/postgres.py). Rebuilt in memory at every open, opening cost a
replay of the whole log (grows with it: 1.7 s for 100,000 events here). The replica still
lives in memory while the store is open (one on disk cost ~20% of PostgreSQL write
throughput, measured), and is saved as a snapshot file when the store closes and every
SNAPSHOT_EVERY events; the next process loads the snapshot (a page copy, no replay) and
catches up only the events logged since its last seq.

- The files live under CLAWTOWER_REPLICA_DIR (default $CLAWTOWER_HOME/replicas), in a folder
  per store: a hash of the URL and of the store's id (a random id kept in PostgreSQL, so a
  database dropped and created again under the same URL never meets an old replica).
- A snapshot is written by one process at a time: each process takes the first free slot
  (`slot-N.db`, held with an exclusive flock on `slot-N.lock` while it is open), so
  processes on one machine never share one, and a finished (or killed) process's slot,
  with its snapshot, is reused by the next one. A snapshot is written to a new file and
  renamed into place, so it is never torn.
- A replica is a cache: one written by another build's schema, or whose last event is not
  the log's event at that seq, is thrown away and rebuilt from the log.
- CLAWTOWER_REPLICA_DIR=":memory:" (or empty) keeps no snapshot (a full replay at open).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sqlite3
from pathlib import Path

from .. import files
from ..config import home
from .schema import LATEST_VERSION
from .sqlite import check_and_migrate

MAX_SLOTS = 64
#: a store's folder nobody has opened for this long (and no process holds) is removed
PRUNE_AFTER_S = 7 * 86400
#: a snapshot is saved every this many events applied (and when the store closes)
SNAPSHOT_EVERY = 20_000


def replica_root() -> Path | None:
    """Where replicas are kept, or None to keep them in memory."""
    raw = os.environ.get("CLAWTOWER_REPLICA_DIR")
    if raw is not None:
        return None if raw.strip() in ("", ":memory:") else Path(raw).expanduser()
    return home() / "replicas"


def memory_replica() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    check_and_migrate(conn, ":memory:")  # whatever migrations this build has
    return conn


def prune(root: Path, *, keep: Path | None = None, now: float | None = None) -> list[Path]:
    """Remove the folders of stores nobody opened for PRUNE_AFTER_S (a database dropped, a
    URL no longer used) and that no process holds (every slot lock free); the removed ones.
    A replica is a cache: at worst a store opened again replays its log once."""
    import time

    at = time.time() if now is None else now
    out: list[Path] = []
    try:
        folders = [p for p in root.iterdir() if p.is_dir() and p != keep]
    except OSError:
        return out
    for folder in folders:
        try:
            newest = max([folder.stat().st_mtime,
                          *(f.stat().st_mtime for f in folder.iterdir())])
        except (OSError, ValueError):
            continue
        if at - newest < PRUNE_AFTER_S:
            continue
        if files.remove_unheld(folder, folder.glob("slot-*.lock")):
            out.append(folder)
    return out


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
            files.write_if_changed(folder / "store.txt", f"{label}\n{store_id}\n")
            os.utime(folder)  # in use: `prune` keeps it
        except OSError:
            return None
        prune(root, keep=folder)
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

    def load(self) -> sqlite3.Connection:
        """An in-memory replica holding the slot's last snapshot (empty without one). A
        snapshot of another schema version, or not a replica at all, is thrown away.
        Loading copies pages (sqlite3's backup): no event is replayed."""
        mem = memory_replica()
        if not self.path.exists():
            return mem
        try:
            snap = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
            try:
                version = snap.execute("PRAGMA user_version").fetchone()[0]
                if version != LATEST_VERSION:
                    raise sqlite3.DatabaseError(f"schema v{version}")
                loaded = sqlite3.connect(":memory:", isolation_level=None,
                                         check_same_thread=False)
                snap.backup(loaded)
            finally:
                snap.close()
            check_and_migrate(loaded, str(self.path))  # a foreign file is refused here
        except Exception:
            self.discard()
            return mem
        mem.close()
        return loaded

    def save(self, replica: sqlite3.Connection) -> None:
        """Write the replica whole to a new file, then put it in place: a crash leaves the
        previous snapshot, never a torn one."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        dst = sqlite3.connect(tmp)
        try:
            replica.backup(dst)  # ends with a synchronous (fsync'd) commit
        finally:
            dst.close()
        os.replace(tmp, self.path)

    def discard(self) -> None:
        for suffix in ("", ".tmp"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.path}{suffix}")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)  # releases the flock: the slot is free for the next process
