"""When a write batch may run on the event loop's own thread (issue 36: one thread hop per
awaited step).

A commit through the writer's thread (aiosqlite) costs two thread hand-offs, to the thread
and back, and the GIL changes hands at every statement while the loop's thread is busy. An
agent's turn awaits two commits per tool round, and a steer waits for the round's commit:
measured on this 2-core machine, the hops were ~1.4 ms of a 3.7-3.8 ms steer.

So a small batch runs on the loop's thread, and everything that could hold the loop goes
to the writer's thread as before:
- a batch of more than `MAX_JOBS` commands (a fan-out's finishes, an import) is work, not
  latency;
- a batch whose BEGIN IMMEDIATE would wait for another process's write lock is run on the
  thread, where it waits with the store's busy timeout (the loop never sleeps on a lock);
- when the batches on the loop's thread take longer than `BUDGET_S` on average (a slow
  disk's fsync), or one took longer than `HEAVY_S` (a heavy command), the batches of the
  next `BACKOFF_S` go to the thread: a slow store holds the loop for a few batches, not
  for every one. An average, not each batch: a machine's scheduler delays one commit in a
  hundred by ~10 ms here, and the disk is not slow for that.
The commit is the same either way (same connection, same BEGIN IMMEDIATE, same fsync at
the store's synchronous mode): only the thread it runs on differs.
"""

from __future__ import annotations

import sqlite3
import time

MAX_JOBS = 8  # the most commands a batch on the loop's thread holds
BUDGET_S = 0.005  # the batches' average time on the loop's thread (weight 1/4 to the last)
HEAVY_S = 0.05  # one batch this slow is enough
BACKOFF_S = 1.0  # how long the batches then go to the thread


class LoopWrites:
    """The policy, and the count of batches run each way (tests, benchmarks)."""

    def __init__(self, budget_s: float = BUDGET_S, backoff_s: float = BACKOFF_S,
                 max_jobs: int = MAX_JOBS, heavy_s: float = HEAVY_S) -> None:
        self.budget_s = budget_s
        self.heavy_s = heavy_s
        self.average = 0.0  # of the batches' times on the loop's thread, since the last move
        self.backoff_s = backoff_s
        self.max_jobs = max_jobs
        self.inline = 0  # batches committed on the loop's thread
        self.moved = 0  # batches sent to the thread after a slow batch or a lock
        self._until = 0.0  # monotonic time before which every batch goes to the thread

    def fits(self, jobs: int) -> bool:
        return jobs <= self.max_jobs and time.monotonic() >= self._until

    def took(self, seconds: float) -> None:
        """A batch ran on the loop's thread for `seconds`."""
        self.inline += 1
        self.average += (seconds - self.average) / 4
        if self.average > self.budget_s or seconds > self.heavy_s:
            self.back_off()

    def back_off(self) -> None:
        """Send the batches of the next `backoff_s` to the thread."""
        self.moved += 1
        self.average = 0.0
        self._until = time.monotonic() + self.backoff_s


def begin_now(conn: sqlite3.Connection, busy_timeout_ms: int) -> bool:
    """BEGIN IMMEDIATE without waiting: False (nothing begun) when another connection holds
    the write lock. The connection's busy timeout is `busy_timeout_ms` again after."""
    conn.execute("PRAGMA busy_timeout=0")
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
            raise
        return False
    finally:
        conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
    return True


__all__ = ["BACKOFF_S", "BUDGET_S", "HEAVY_S", "MAX_JOBS", "LoopWrites", "begin_now"]
