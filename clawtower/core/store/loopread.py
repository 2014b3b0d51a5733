"""Reads on the event loop's own thread, with a time budget (issue 36: one thread hop per
awaited step).

A read through the store's reader thread (aiosqlite) costs two thread hand-offs, to the
thread and back, of 50-100 µs each on a busy 2-core machine, for a keyed statement that
takes 10-20 µs. Every awaited step of an agent (the steering check at a turn's boundary,
the orchestrator's scan after an approval, a flow's watch for ended turns) paid that on
top of its commit's own hand-off.

Here a read runs on the loop's thread on a read-only connection of its own. It may never
stall the loop: a progress handler interrupts the statement once it has run for the
budget, and a read that was interrupted, met a lock (`busy_timeout` 0: a WAL reader waits
only in rare recovery cases) or failed in any way answers None, so the caller runs it on
the reader thread exactly as before (same rows, same errors). A long read costs the budget
once more; every other read costs no hand-off at all. Autocommit: no read transaction
outlives the call, so the WAL is never pinned.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from typing import Any

BUDGET_S = 0.002  # the longest the loop's thread is held by one read before it moves
STEPS = 1000  # SQLite VM steps between two looks at the clock (a few µs)
NEVER = float("inf")


class LoopReader:
    """A read-only connection used only from the thread that opened it (the loop's)."""

    def __init__(self, uri: str, budget_s: float = BUDGET_S) -> None:
        self.budget_s = budget_s
        self.thread = threading.get_ident()
        self.moved = 0  # reads handed to the reader thread (tests, benchmarks)
        self._deadline = NEVER
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            uri, uri=True, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA busy_timeout=0")
        self._conn.execute("PRAGMA query_only=1")
        self._conn.set_progress_handler(self._tick, STEPS)

    def _tick(self) -> int:
        return 1 if time.perf_counter() > self._deadline else 0

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]] | None:
        """The rows, or None: run it on the reader thread instead."""
        conn = self._usable()
        if conn is None:
            return None
        self._deadline = time.perf_counter() + self.budget_s
        try:
            cur = conn.execute(sql, params)
            rows = cur.fetchall()
        except sqlite3.Error:
            self.moved += 1
            return None
        finally:
            self._deadline = NEVER
        if cur.description is None:
            return []
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in rows]

    def fetch_many(self, queries: Sequence[tuple[str, Sequence[Any]]]
                   ) -> list[list[dict[str, Any]]] | None:
        """Every query's rows from one snapshot, or None (see `fetchall`)."""
        conn = self._usable()
        if conn is None:
            return None
        self._deadline = time.perf_counter() + self.budget_s
        out: list[list[dict[str, Any]]] = []
        try:
            conn.execute("BEGIN")
            for sql, params in queries:
                cur = conn.execute(sql, params)
                rows = cur.fetchall()
                names = [d[0] for d in cur.description or ()]
                out.append([dict(zip(names, r, strict=True)) for r in rows])
            self._deadline = NEVER
            conn.execute("COMMIT")
        except sqlite3.Error:
            self._deadline = NEVER
            if conn.in_transaction:  # never leave a read transaction pinning the WAL
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    self.close()
            self.moved += 1
            return None
        return out

    def _usable(self) -> sqlite3.Connection | None:
        if self._conn is None or threading.get_ident() != self.thread:
            return None
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()


def open_loop_reader(uri: str) -> LoopReader | None:
    """A loop reader for the store at `uri`, or None where it cannot open (the reader thread
    then answers every read, as before)."""
    try:
        return LoopReader(uri)
    except sqlite3.Error:
        return None


__all__ = ["BUDGET_S", "LoopReader", "open_loop_reader"]
