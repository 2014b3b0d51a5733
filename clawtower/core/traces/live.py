"""Live export: a worker of the engine (core/workers.py) that follows the log and sends
each span to the OTLP/HTTP collector of `telemetry:` once its end is logged.

- Its position is in the store (a `traces.exported` event per step that sent spans): a
  restart goes on from there, so a span is sent once across restarts (a crash between the
  collector's answer and that event sends that one step again).
- One process exports per collector: the lease `traces:<endpoint>`.
- A collector that is down or refuses: the step is tried again with backoff; the log keeps
  what was not sent, so nothing is lost and no queue grows in memory.
- It never blocks an agent: deriving and sending run in a thread, at most once per
  `interval_s`, and it writes only its position. While the log keeps growing, a step waits
  until its expected CPU time (the last step's per event, times the log's length: deriving
  is linear in it) is at most SHARE of the time since the last one (its threads hold the
  GIL the agents' loop needs); once the log has been quiet for `interval_s` (the agents
  wait on something) it goes at once.
- A span whose end is not logged yet is held back and sent when it ends; a top-level
  session's span ends with its last job while it is idle and is sent again (same id, later
  end) when it works again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

from .. import leases
from ..aio import unless_set, wait_event
from ..events import NewEvent
from ..store.faults import Backoff
from ..store.interface import Store
from .builder import Redact, derive
from .config import TelemetryConfig
from .events import TracesExported
from .otlp import export, headers_from
from .read import read_log, store_salt
from .rows import LogEvent
from .spans import Trace

log = logging.getLogger(__name__)

Send = Callable[[list[Trace]], int]

T = TypeVar("T")
SHARE = 0.05  # of the time, at most, the exporter takes while the log keeps growing


def exporter_id(endpoint: str) -> str:
    return "otlp:" + hashlib.sha256(endpoint.encode()).hexdigest()[:16]


def due(traces: list[Trace], after: int, upto: int) -> list[Trace]:
    """The closed spans whose closing event is in (after, upto]."""
    out = []
    for t in traces:
        spans = tuple(s for s in t.spans if not s.open and after < s.last_seq <= upto)
        if spans:
            out.append(dataclasses.replace(t, spans=spans))
    return out


class TracesWorker:
    """The engine's trace exporter (`telemetry.otlp_endpoint` set)."""

    name = "traces"

    def __init__(self, store: Store, config: TelemetryConfig, *, owner: str | None = None,
                 send: Send | None = None, lease_ttl_s: float = 10.0,
                 redact: Redact | None = None) -> None:
        assert config.otlp_endpoint is not None
        self.store = store
        self.config = config
        self.endpoint = config.otlp_endpoint
        self.entity = exporter_id(self.endpoint)
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lease = f"traces:{self.entity}"
        self.lease_ttl_s = lease_ttl_s
        self.send = send or self._send
        self.redact = redact  # of captured content (traces/redact.py)
        self.position: int | None = None  # the log position everything before is sent for
        self.events: list[LogEvent] = []  # the log read so far (payloads parsed lazily)
        self.salt: str | None = None
        self.failing = ""  # the last step's error while the collector refuses
        self.sent = 0
        self.cost = 0.0  # CPU seconds the steps' threads took (the pace is set from it)
        self.per_event = 0.0  # the last step's CPU seconds per event of the log
        self.ended_at = float("-inf")  # the loop's time when the last step ended
        self._stop = asyncio.Event()

    def _send(self, traces: list[Trace]) -> int:
        headers = {}
        if self.config.headers_env:
            headers = headers_from(os.environ.get(self.config.headers_env, ""))
        return export(traces, self.endpoint, headers=headers,
                      service_name=self.config.service_name, timeout_s=self.config.timeout_s)

    async def durable_position(self) -> int:
        row = await self.store.fetchone(
            "SELECT payload FROM events WHERE entity=? AND entity_id=? AND type=?"
            " ORDER BY seq DESC LIMIT 1", ("telemetry", self.entity, TracesExported.TYPE))
        return int(json.loads(row["payload"])["seq"]) if row else 0

    def _timed(self, work: Callable[[], T]) -> T:
        """`work` in this thread, its CPU time added to `cost` (a collector's slow answer is
        a wait, not a cost to the agents)."""
        began = time.thread_time()
        try:
            return work()
        finally:
            self.cost += time.thread_time() - began

    async def step(self) -> int:
        """Send what closed since the position; returns how many spans were sent."""
        if self.position is None:
            self.position = await self.durable_position()
        self.events.extend(await read_log(self.store, self.events[-1].seq if self.events
                                          else 0))
        upto = self.events[-1].seq if self.events else 0
        if upto <= self.position:
            return 0
        if self.salt is None:  # the store's identity: its first event, which never changes
            self.salt = await store_salt(self.store)
        salt, after = self.salt, self.position
        traces = await asyncio.to_thread(self._timed, lambda: due(derive(
            self.events, salt=salt, redact=self.redact,
            capture_content=self.config.capture_content), after, upto))
        n = sum(len(t.spans) for t in traces)
        if n:
            await asyncio.to_thread(self._timed, lambda: self.send(traces))
            await self.store.append([NewEvent(
                entity_id=self.entity, actor=self.owner, role="system",
                payload=TracesExported(endpoint=self.endpoint, seq=upto, spans=n,
                                       traces=len(traces)))])
            self.sent += n
        # nothing due: the position moves in memory only (a restart finds nothing more)
        self.position = upto
        return n

    async def run(self, stop: asyncio.Event) -> None:
        relay = asyncio.create_task(_relay(stop, self._stop))
        backoff = Backoff(first=0.5, cap=30.0)
        try:
            loop = asyncio.get_running_loop()
            renew_at = 0.0
            quiet = False  # the log did not change for interval_s
            while not self._stop.is_set():
                try:
                    if loop.time() >= renew_at:
                        if not await leases.acquire(self.store, self.lease, self.owner,
                                                    self.lease_ttl_s):
                            self.position = None  # another process exports: re-read later
                            await wait_event(self._stop, self.lease_ttl_s / 2)
                            continue
                        renew_at = loop.time() + self.lease_ttl_s / 3
                    if quiet or loop.time() >= self._step_at(await self.store.last_seq()):
                        began = self.cost
                        try:
                            await self.step()
                        finally:  # a step that failed (a collector down) spent it too
                            self.per_event = (self.cost - began) / max(1, len(self.events))
                            self.ended_at = loop.time()
                        self.failing = ""
                        backoff = Backoff(first=0.5, cap=30.0)
                    quiet = await self._wait(loop, renew_at)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the collector, most likely: the log keeps it
                    self.failing = str(exc)
                    quiet = False  # the next try keeps to the budget as any step
                    log.warning("traces: %s; trying again", exc)
                    await wait_event(self._stop, backoff.next())
        finally:
            relay.cancel()
            with contextlib.suppress(Exception):
                await leases.release(self.store, self.lease, self.owner)

    def _step_at(self, seq: int) -> float:
        """When the next step may go while the log keeps growing: interval_s after the last
        one, and late enough that its cost (the last step's CPU time per event, times the
        log's length now: deriving is linear in it) is at most SHARE of the time since."""
        return self.ended_at + max(self.config.interval_s,
                                   self.per_event * seq * (1 / SHARE - 1))

    async def _wait(self, loop: asyncio.AbstractEventLoop, renew_at: float) -> bool:
        """Wait for the next step (or the lease's renewal): for something new in the log,
        then for `_step_at`. True when the log has been quiet for interval_s before it."""
        seq = await self.store.last_seq()
        if self.position is not None and self.position >= seq:  # all sent: wait for more
            if not await self._until_change(seq, renew_at - loop.time()):
                return False
            seq = await self.store.last_seq()
        while not self._stop.is_set() and loop.time() < min(self._step_at(seq), renew_at):
            span = min(self.config.interval_s, self._step_at(seq) - loop.time(),
                       renew_at - loop.time())
            await wait_event(self._stop, span)  # once a span, not at every commit
            now = await self.store.last_seq()
            if now == seq and span >= self.config.interval_s:
                return True  # quiet: the agents wait on something, send now
            seq = now
        return False

    async def _until_change(self, seq: int, timeout: float) -> bool:
        """Whether the log passed `seq` within `timeout` (stopping ends the wait)."""
        now = await unless_set(self._stop, self.store.wait_for_change(seq, max(0.0, timeout)))
        return now is not None and now > seq

    def stop(self) -> None:
        self._stop.set()

    async def idle(self) -> bool:
        """Nothing left to send (or the collector refuses: what is left goes later)."""
        if self.failing:
            return True
        return self.position is not None and self.position >= await self.store.last_seq()


async def _relay(stop: asyncio.Event, mine: asyncio.Event) -> None:
    await stop.wait()
    mine.set()
