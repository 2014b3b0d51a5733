"""Webhook authentication failures, rate-limited per source address and per trigger.

Sliding windows of refused credentials over the last `window_s`:

- per (address, expert, trigger): once it holds `limit` of them, that address's requests to
  that trigger are answered 429 (with Retry-After) *before* credentials are checked, so
  guessing costs `limit` tries per window and a 429 says nothing about the guess;
- per trigger, across addresses: once it holds `trigger_limit` of them (an attack from many
  addresses), every address that has itself failed within the window is answered 429 too,
  so each further address gets one try per window. An address that has not failed (the
  legitimate sender, authenticating correctly) is never affected.

A 429 is not itself counted: a lock ends at most `window_s` after the failures that caused
it, whatever the attacker keeps sending. State is per `clawtower serve` process (as
OpenClaw's limiter); every refusal and every throttle episode is also an event
(core/triggers/events.py) for `triggers list` and the console. Memory is bounded: at most
`max_keys` addresses are tracked, the stalest dropped first.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_LIMIT = 20
DEFAULT_WINDOW_S = 60.0
TRIGGER_FACTOR = 5  # the per-trigger limit, by default, in multiples of the address limit
MAX_KEYS = 50_000

Key = tuple[str, str, str]  # (address, expert, trigger)


@dataclass
class FailureLimiter:
    limit: int = DEFAULT_LIMIT
    window_s: float = DEFAULT_WINDOW_S
    clock: Callable[[], float] = time.monotonic
    max_keys: int = MAX_KEYS
    trigger_limit: int = 0  # 0: TRIGGER_FACTOR x limit
    _fails: OrderedDict[Key, deque[float]] = field(default_factory=OrderedDict)
    _triggers: dict[tuple[str, str], deque[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.trigger_limit <= 0:
            self.trigger_limit = TRIGGER_FACTOR * self.limit

    def _recent(self, store: Any, key: Any, now: float) -> deque[float] | None:
        q: deque[float] | None = store.get(key)
        if q is None:
            return None
        while q and q[0] <= now - self.window_s:
            q.popleft()
        if not q:
            del store[key]
            return None
        return q

    def retry_after(self, key: Key) -> int | None:
        """Seconds until `key` may try again, or None when it is not throttled."""
        now = self.clock()
        q = self._recent(self._fails, key, now)
        if q is None:  # no failure of its own: never throttled
            return None
        waits = []
        if len(q) >= self.limit:
            waits.append(q[-self.limit] + self.window_s)
        tq = self._recent(self._triggers, key[1:], now)
        if tq is not None and len(tq) >= self.trigger_limit:  # free when either ages out
            waits.append(min(q[-1], tq[-self.trigger_limit]) + self.window_s)
        return max(1, math.ceil(max(waits) - now)) if waits else None

    def fail(self, key: Key) -> str | None:
        """Count one refused credential. Returns "address" or "trigger" when this one
        reached that limit (the start of a throttle episode, recorded once), else None."""
        now = self.clock()
        q = self._recent(self._fails, key, now)
        if q is None:
            q = self._fails[key] = deque(maxlen=self.limit)
            while len(self._fails) > self.max_keys:
                self._fails.popitem(last=False)
        else:
            self._fails.move_to_end(key)
        before = len(q)
        q.append(now)
        tq = self._recent(self._triggers, key[1:], now)
        if tq is None:
            tq = self._triggers[(key[1], key[2])] = deque(maxlen=self.trigger_limit)
        t_before = len(tq)
        tq.append(now)
        if t_before == self.trigger_limit - 1:
            return "trigger"
        return "address" if before == self.limit - 1 else None
