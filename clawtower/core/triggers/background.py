"""The trigger runtime's background half, as the engine (core/workers.py) runs it in
`serve`, `serve --until-idle` and the console: the queue worker, the cron scheduler and the
channel watcher. The webhook HTTP server is a front end's concern (core/triggers/service.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from ..clock import Clock
from ..store.interface import Store
from .catalog import Catalog
from .channel import ChannelWatcher
from .cron import Scheduler
from .worker import Executor, Worker

#: an invocation that can still move without a human: queued or due for a retry, unless an
#: earlier invocation of its lane waits at a gate (the lane runs one at a time); running
#: (here or in another process, whose lease lapses if it died); or paused at a gate whose
#: run has ended (its outcome is still to be recorded)
_MOVABLE = (
    "SELECT 1 FROM trigger_items t WHERE (t.status IN ('queued', 'retry') AND NOT EXISTS"
    " (SELECT 1 FROM trigger_items o WHERE o.lane = t.lane AND o.seq < t.seq AND"
    " o.status = 'paused')) OR t.status = 'running' OR (t.status = 'paused' AND EXISTS"
    " (SELECT 1 FROM workflow_runs r WHERE r.id = t.run_id AND r.status IN"
    " ('ok', 'failed', 'cancelled'))) LIMIT 1")


@dataclass
class TriggerWorkers:
    store: Store
    capacity: int = 8
    clock: Clock | None = None
    executor: Executor | None = None
    catalog: Catalog = field(default_factory=Catalog)
    worker: Worker | None = None
    errors: list[str] = field(default_factory=list)
    name: str = "triggers"

    def __post_init__(self) -> None:
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop` (or `self.stop()`): in-flight runs get the worker's drain time, what
        is queued stays queued for the next worker."""
        self.worker = Worker(self.store, catalog=self.catalog, executor=self.executor,
                             capacity=self.capacity, clock=self.clock)
        scheduler = Scheduler(self.store, catalog=self.catalog, clock=self.clock)
        channels = ChannelWatcher(self.store, catalog=self.catalog)
        both = asyncio.Event()
        tasks: list[asyncio.Task[Any]] = [
            asyncio.create_task(self.worker.run(both), name="trigger-worker"),
            asyncio.create_task(scheduler.run(both), name="trigger-cron"),
            asyncio.create_task(channels.run(both), name="trigger-channels")]
        outer = asyncio.ensure_future(stop.wait())
        own = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait([outer, own], return_when=asyncio.FIRST_COMPLETED)
        finally:
            outer.cancel()
            own.cancel()
            both.set()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            self.errors = [*self.errors, *self.worker.errors, *scheduler.errors,
                           *channels.errors]

    async def idle(self) -> bool:
        """No invocation that can still move without a human (see `_MOVABLE`)."""
        if self.worker is not None and self.worker.running:
            return False
        return await self.store.fetchone(_MOVABLE) is None


__all__ = ["TriggerWorkers"]
