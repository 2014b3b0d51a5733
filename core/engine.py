"""The engine: an orchestrator that runs only while this process holds the store's lease.

Several processes (consoles, `clawtower serve`) may attach to one store; the lease makes
sure exactly one of them drives tasks at a time, and a killed holder's work is taken over
when its lease expires. The holder also adopts workflow runs whose driver died (each run has
its own lease, core/workflows/service.py) and drives them on.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import socket
import uuid
from typing import Any

from . import leases
from .agents.registry import AgentSet
from .aio import wait_event
from .clock import Clock, SystemClock
from .effects import EffectSink
from .orchestrator import Orchestrator
from .store.interface import Store
from .workflows.service import Workflows

LEASE_NAME = "orchestrator"


class Engine:
    def __init__(self, store: Store, agents: AgentSet, *, clock: Clock | None = None,
                 effects: EffectSink | None = None, lease_ttl_s: float = 10.0,
                 owner: str | None = None, workflows: Workflows | None = None) -> None:
        self.store = store
        self.clock = clock or SystemClock()
        self.orchestrator = Orchestrator(store, agents, clock=self.clock, effects=effects)
        self.lease_ttl_s = lease_ttl_s
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.holding = False
        self._stop = asyncio.Event()
        # adopted workflow runs: driven here, warnings kept out of a console's screen
        self.workflows = workflows or Workflows(store, actor="engine",
                                                stderr=lambda _text: None)
        self.adopted: dict[str, asyncio.Task[Any]] = {}
        self.adoption_errors: collections.deque[str] = collections.deque(maxlen=50)

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Wait for the lease, drive while holding it, renew it; release on stop."""
        try:
            while not self._stop.is_set():
                self.holding = await leases.acquire(self.store, LEASE_NAME, self.owner,
                                                    self.lease_ttl_s)
                if not self.holding:
                    await wait_event(self._stop, self.lease_ttl_s / 3)
                    continue
                drive_stop = asyncio.Event()
                driver = asyncio.create_task(self.orchestrator.run(drive_stop))
                try:
                    while not self._stop.is_set():
                        await self._adopt_runs()
                        await wait_event(self._stop, self.lease_ttl_s / 3)
                        if self._stop.is_set():
                            break
                        if not await leases.acquire(self.store, LEASE_NAME, self.owner,
                                                    self.lease_ttl_s):
                            break  # lost it (e.g. we stalled past the TTL): stop driving
                finally:
                    drive_stop.set()
                    await driver
                    self.holding = False
        finally:
            for task in self.adopted.values():  # as a console's quit does: recorded failed
                task.cancel()
            await asyncio.gather(*self.adopted.values(), return_exceptions=True)
            with contextlib.suppress(Exception):
                await leases.release(self.store, LEASE_NAME, self.owner)

    async def _adopt_runs(self) -> None:
        """Start driving each workflow run nobody drives (its driver died)."""
        self.adopted = {k: t for k, t in self.adopted.items() if not t.done()}
        try:
            orphans = await self.workflows.adoptable()
        except Exception as exc:  # the store keeps the truth; try again next tick
            self.adoption_errors.append(f"adoption sweep: {exc}")
            return
        for run_id in orphans:
            if run_id not in self.adopted:
                self.adopted[run_id] = asyncio.create_task(self._adopt(run_id),
                                                           name=f"adopt-{run_id}")

    async def _adopt(self, run_id: str) -> None:
        try:
            envelope = await self.workflows.adopt(run_id)
        except Exception as exc:  # e.g. another process adopted it first (a Conflict)
            self.adoption_errors.append(f"{run_id}: {exc}")
            return
        if not envelope.get("ok"):
            self.adoption_errors.append(f"{run_id}: {envelope['error']['message']}")
