"""Webhook authentication failures, rate-limited per source address and trigger.

A sliding window: each (address, expert, trigger) keeps the times of its refused credentials
within the last `window_s`. Once it holds `limit` of them, that address's requests to that
trigger are answered 429 (with Retry-After) *before* credentials are checked, so guessing
costs `limit` tries per window and a 429 says nothing about the guess. A 429 is not itself
counted: the lock ends at most `window_s` after the last refused credential, whatever the
attacker keeps sending, and a sender at any other address is never affected.

State is per `clawtower serve` process (as OpenClaw's limiter); every refusal and every
throttle episode is also an event (core/triggers/events.py) for `triggers list` and the
console. Memory is bounded: at most `max_keys` keys are tracked, the stalest dropped first.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_LIMIT = 20
DEFAULT_WINDOW_S = 60.0
MAX_KEYS = 50_000

Key = tuple[str, str, str]  # (address, expert, trigger)


@dataclass
class FailureLimiter:
    limit: int = DEFAULT_LIMIT
    window_s: float = DEFAULT_WINDOW_S
    clock: Callable[[], float] = time.monotonic
    max_keys: int = MAX_KEYS
    _fails: OrderedDict[Key, deque[float]] = field(default_factory=OrderedDict)

    def _recent(self, key: Key, now: float) -> deque[float] | None:
        q = self._fails.get(key)
        if q is None:
            return None
        while q and q[0] <= now - self.window_s:
            q.popleft()
        if not q:
            del self._fails[key]
            return None
        return q

    def retry_after(self, key: Key) -> int | None:
        """Seconds until `key` may try again, or None when it is not throttled."""
        now = self.clock()
        q = self._recent(key, now)
        if q is None or len(q) < self.limit:
            return None
        return max(1, math.ceil(q[-self.limit] + self.window_s - now))

    def fail(self, key: Key) -> bool:
        """Count one refused credential; True when this one reached the limit (the start of
        a throttle episode, recorded once)."""
        now = self.clock()
        q = self._recent(key, now)
        if q is None:
            q = self._fails[key] = deque(maxlen=self.limit)
            while len(self._fails) > self.max_keys:
                self._fails.popitem(last=False)
        else:
            self._fails.move_to_end(key)
        before = len(q)
        q.append(now)
        return before == self.limit - 1
