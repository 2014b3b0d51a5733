"""Cron triggers: `expr` (5 fields, or 6 with seconds first) in the IANA zone `tz`.

No double fire: each fire is appended with the idem_key `cron:<expert>/<trigger>:<time>`,
so when several processes serve one store the second append of the same scheduled time is
refused by the store, whoever runs first.

Missed fires (the policy): a scheduler that was down when fires were due fires ONCE for the
most recent scheduled time it missed (the event carries `missed`, how many earlier times it
coalesced) and then follows the schedule. A trigger never seen before starts from now: it
does not fire for times before the first scheduler saw it.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

from croniter import croniter  # type: ignore[import-untyped,unused-ignore]

from ..clock import Clock, SystemClock
from ..errors import ClawError
from ..store.interface import Store
from . import queue as q
from .catalog import Catalog
from .intake import accept_prepared_in
from .spec import TriggerSpec

MAX_COALESCE = 100_000  # missed times counted at most (a 1-second cron down for a day)


def _iter(spec: TriggerSpec, after: float) -> Any:
    expr = spec.expr or ""
    start = datetime.fromtimestamp(after, ZoneInfo(spec.tz or "UTC"))
    return croniter(expr, start, ret_type=float,
                    second_at_beginning=len(expr.split()) == 6)


def next_fire(spec: TriggerSpec, after: float) -> float:
    """The first scheduled time strictly after `after` (unix seconds)."""
    return float(_iter(spec, after).get_next(float))


def due(spec: TriggerSpec, last: float, now: float) -> tuple[float, int] | None:
    """The latest scheduled time in (last, now] and how many earlier ones it coalesces."""
    it = _iter(spec, last)
    t = float(it.get_next(float))
    if t > now:
        return None
    missed = 0
    while missed < MAX_COALESCE:
        nxt = float(it.get_next(float))
        if nxt > now:
            break
        t = nxt
        missed += 1
    return t, missed


class Scheduler:
    """Fires the cron triggers of every installed expert against `clock`."""

    def __init__(self, store: Store, *, catalog: Catalog | None = None,
                 clock: Clock | None = None, max_sleep_s: float = 1.0) -> None:
        self.store = store
        self.catalog = catalog or Catalog()
        self.clock = clock or SystemClock()
        self.max_sleep_s = max_sleep_s
        self._seen: dict[tuple[str, str], float] = {}  # first sight of a never-fired trigger
        self.errors: list[str] = []

    async def last_fires(self) -> dict[tuple[str, str], float]:
        rows = await self.store.fetchall("SELECT expert, trigger, last_fire FROM trigger_cron")
        return {(r["expert"], r["trigger"]): float(r["last_fire"]) for r in rows}

    async def tick(self) -> list[dict[str, Any]]:
        """Fire every trigger that is due now; returns what was accepted."""
        now = self.clock.now()
        last = await self.last_fires()
        fired = []
        for spec in self.catalog.of_type("cron"):
            if spec.inactive:
                continue
            k = (spec.expert, spec.name)
            base = last.get(k)
            if base is None:
                base = self._seen.setdefault(k, now)
            try:
                hit = due(spec, base, now)
            except (ValueError, KeyError) as exc:
                self.errors.append(f"{spec.expert}/{spec.name}: {exc}")
                continue
            if hit is None:
                continue
            at, missed = hit
            p = q.prepare(spec, {"fired_at": at, "scheduled": datetime.fromtimestamp(
                at, ZoneInfo(spec.tz or "UTC")).isoformat(), "missed": missed,
                "trigger": spec.name}, "cron", strict=False)
            p.fire_at, p.missed = at, missed
            p.idem_key = f"cron:{spec.expert}/{spec.name}:{at:.3f}"
            try:
                out = await self.store.execute(partial(accept_prepared_in, p=p))
            except ClawError as exc:
                self.errors.append(f"{spec.expert}/{spec.name}: {exc}")
                continue
            if out["status"] != "replayed":
                fired.append({**out, "expert": spec.expert, "trigger": spec.name,
                              "fire_at": at, "missed": missed})
        return fired

    async def seconds_to_next(self) -> float:
        now = self.clock.now()
        last = await self.last_fires()
        best = self.max_sleep_s
        for spec in self.catalog.of_type("cron"):
            k = (spec.expert, spec.name)
            base = last.get(k, self._seen.get(k, now))
            try:
                best = min(best, next_fire(spec, max(base, now - 1e-6)) - now)
            except (ValueError, KeyError):
                continue
        return max(0.0, best)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.tick()
            wait = await self.seconds_to_next()
            sleeper = asyncio.ensure_future(self.clock.sleep(wait))
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait([sleeper, stopper], return_when=asyncio.FIRST_COMPLETED)
            sleeper.cancel()
            stopper.cancel()
