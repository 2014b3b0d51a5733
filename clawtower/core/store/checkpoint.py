"""WAL checkpoints off the writer's critical path (issue 24.4).

Why: SQLite's auto-checkpoint runs inside the COMMIT that crosses its threshold (1,000 WAL
frames), on the writer's thread, before any caller of that batch is answered: it copies the
WAL into the database file and syncs it. A large store pays that every ~4 MB of WAL, inside an
awaited step. Here a background task on its own connection (its own thread) runs PASSIVE
checkpoints instead, which never block the writer, once the WAL holds CHECKPOINT_FRAMES frames
not yet copied. The WAL stays bounded: the writer keeps SQLite's own auto-checkpoint, raised
to WAL_BOUND_FRAMES. A WAL restarts (is reused from its start) only when a write begins with
every frame copied; under continuous writes a background pass rarely ends in such a gap, so
the WAL grows to the bound, where the writer's own checkpoint finds only the frames written
since the last background pass (~1,000 at most in bench_flows' 10,000-node run, against
1,000 copied on every crossing before) and the WAL restarts.

Only on an SQLite without the WAL-reset race (RACE_FREE): through 3.51.2, a checkpoint on one
connection while another commits the transaction that resets the WAL can leave a wrong
backfill count, and a later checkpoint then skips committed frames (database corruption; see
https://sqlite.org/wal.html#walresetbug, fixed in 3.51.3). The background pass is exactly
that second connection, so on an older SQLite (this machine's Python has 3.40.1) the store
keeps SQLite's auto-checkpoint on its one writer connection, as before.

Durability is otherwise unchanged: a commit is durable once its WAL frames are
(synchronous=FULL syncs them at COMMIT); a checkpoint only copies durable frames, syncing the
WAL before and the database after (the checkpointing connection has the store's synchronous
setting).

How many frames wait is read from the WAL-index header in the `-shm` file (mxFrame and
nBackfill; layout documented in https://www.sqlite.org/walformat.html, section 2.1). A read
of a header being rewritten can be torn; it only decides when to start a PASSIVE pass, which
is always correct. Where the header cannot be read, nothing changes: SQLite's own
auto-checkpoint at its default threshold.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import struct
from typing import Any

#: this SQLite has the WAL-reset fix (3.51.3; backports to older branches are not recognised,
#: which only leaves them on the old path)
RACE_FREE = sqlite3.sqlite_version_info >= (3, 51, 3)

#: frames waiting in the WAL (not yet in the database file) that start a background pass:
#: SQLite's own default auto-checkpoint threshold
CHECKPOINT_FRAMES = 1000
#: the WAL's bound (~16 MB at 4 KB pages): past it the writer checkpoints at COMMIT what the
#: background passes have not copied yet (SQLite's wal_autocheckpoint)
WAL_BOUND_FRAMES = 4000

_WAL_INDEX_VERSION = 3007000
_HEADER = struct.Struct("=I12xI")  # iVersion at 0, mxFrame at 16 (native byte order)
_BACKFILL = struct.Struct("=I")  # nBackfill at 96 (WalCkptInfo after the header's two copies)


class WalIndex:
    """Reads how many WAL frames are not yet checkpointed, from the `-shm` file."""

    def __init__(self, db_path: str) -> None:
        self.path = f"{db_path}-shm"
        self._fd: int | None = None
        self.usable = hasattr(os, "pread")

    def pending(self) -> int | None:
        """mxFrame - nBackfill, or None when the header cannot be read."""
        if not self.usable:
            return None
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDONLY)
            raw = os.pread(self._fd, 100, 0)
        except OSError:
            return None
        if len(raw) < 100:
            return None
        version, mx_frame = _HEADER.unpack_from(raw, 0)
        if version != _WAL_INDEX_VERSION:
            self.usable = False  # not the format we know: leave checkpoints to SQLite
            return None
        (backfilled,) = _BACKFILL.unpack_from(raw, 96)
        return max(0, int(mx_frame) - int(backfilled))

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def passive_checkpoint(conn: Any) -> tuple[int, int, int]:
    """One PASSIVE checkpoint on `conn` (a sqlite3 connection of its own, never the
    writer's): (busy, frames in the WAL, frames checkpointed), as SQLite reports them."""
    row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)
