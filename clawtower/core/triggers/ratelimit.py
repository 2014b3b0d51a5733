"""Refused credentials, rate-limited per source address and per scope, counted in the store.

A scope is what is being guessed at: a webhook trigger ("hook:<expert>/<trigger>") or the
web console's sign-in ("console"). Sliding windows of refused credentials over the last
`window_s`:

- per (scope, address): once it holds `limit` of them, that address's requests to that scope
  are answered 429 (with Retry-After) *before* credentials are checked, so guessing costs
  `limit` tries per window and a 429 says nothing about the guess;
- per scope, across addresses: once it holds `trigger_limit` of them (an attack from many
  addresses), every address that has itself failed within the window is answered 429 too,
  so each further address gets one try per window. An address that has not failed (the
  legitimate sender, authenticating correctly) is never affected.

A 429 is not itself counted: a lock ends at most `window_s` after the failures that caused
it, whatever the attacker keeps sending.

The counts are the store's (issue 35): every counted refusal is an event whose projection
adds a row to `auth_failures` (schema v20) and drops its scope's rows older than the
window, so every `serve` (or `console --web`) process on one store counts together and a
restart forgets nothing. `retry_after` is one read of that table's indexes (no write for an
accepted request); `fail` runs inside the write transaction that records the refusal, so the
start of an episode (the failure that reaches a limit) is seen by exactly one process.
Processes sharing a store should share `--auth-window` too: each failure prunes its scope
with its own window.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..store.interface import Store, WriteTx

if TYPE_CHECKING:
    from ..events import StoredEvent

DEFAULT_LIMIT = 20
DEFAULT_WINDOW_S = 60.0
TRIGGER_FACTOR = 5  # the per-scope limit, by default, in multiples of the address limit

_OWN = ("SELECT at FROM auth_failures WHERE scope=? AND address=? AND at>? ORDER BY at DESC"
        " LIMIT ?")
_SCOPE = ("SELECT at FROM auth_failures WHERE scope=? AND at>? ORDER BY at DESC"
          " LIMIT 1 OFFSET ?")


def hook_scope(expert: str, trigger: str) -> str:
    return f"hook:{expert}/{trigger}"


def count_failure(db: sqlite3.Connection, e: StoredEvent, scope: str, address: str,
                  window_s: float) -> None:
    """A projection's part (the failure events of core/triggers and core/signin): one refused
    credential in the shared window; the scope's rows that left the window (as of this
    event) go, so the table holds about one window."""
    if window_s > 0:
        db.execute("DELETE FROM auth_failures WHERE scope=? AND at<=?",
                   (scope, e.ts - window_s))
    db.execute("INSERT INTO auth_failures (seq, scope, address, at) VALUES (?, ?, ?, ?)",
               (e.seq, scope, address, e.ts))


@dataclass
class FailureLimiter:
    limit: int = DEFAULT_LIMIT
    window_s: float = DEFAULT_WINDOW_S
    trigger_limit: int = 0  # 0: TRIGGER_FACTOR x limit

    def __post_init__(self) -> None:
        if self.trigger_limit <= 0:
            self.trigger_limit = TRIGGER_FACTOR * self.limit

    def _queries(self, scope: str, address: str, now: float
                 ) -> list[tuple[str, Sequence[Any]]]:
        since = now - self.window_s
        return [(_OWN, (scope, address, since, self.limit)),
                (_SCOPE, (scope, since, self.trigger_limit - 1))]

    def _wait(self, own: list[dict[str, Any]], nth: list[dict[str, Any]], now: float
              ) -> int | None:
        """`own`: the address's failures in the window, newest first (at most `limit`);
        `nth`: the scope's `trigger_limit`-th newest failure in the window, if any."""
        if not own:  # no failure of its own: never throttled
            return None
        waits = []
        if len(own) >= self.limit:
            waits.append(float(own[self.limit - 1]["at"]) + self.window_s)
        if nth:  # free when either ages out
            waits.append(min(float(own[0]["at"]), float(nth[0]["at"])) + self.window_s)
        return max(1, math.ceil(max(waits) - now)) if waits else None

    async def retry_after(self, store: Store, scope: str, address: str) -> int | None:
        """Seconds until `address` may try `scope` again, or None when it is not throttled
        (one read, one snapshot)."""
        now = store.clock.now()
        own, nth = await store.fetch_many(self._queries(scope, address, now))
        return self._wait(own, nth, now)

    def retry_after_tx(self, tx: WriteTx, scope: str, address: str) -> int | None:
        """`retry_after` inside a write transaction (after a failure was emitted)."""
        own, nth = (tx.all(sql, params) for sql, params in
                    self._queries(scope, address, tx.now))
        return self._wait(own, nth, tx.now)

    def fail(self, tx: WriteTx, scope: str, address: str) -> str | None:
        """Before the failure's event is emitted in `tx`: "address" or "scope" when this one
        reaches that limit (the start of a throttle episode, recorded once), else None."""
        since = tx.now - self.window_s
        own = tx.all(_OWN, (scope, address, since, self.limit))
        before = tx.all(_SCOPE, (scope, since, self.trigger_limit - 2)) \
            if self.trigger_limit >= 2 else [{"at": tx.now}]
        after = tx.all(_SCOPE, (scope, since, self.trigger_limit - 1))
        if before and not after:  # this failure is the scope's trigger_limit-th
            return "scope"
        return "address" if len(own) == self.limit - 1 else None
