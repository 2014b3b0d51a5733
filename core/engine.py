"""The engine: an orchestrator that runs only while this process holds the store's lease.

Several processes (consoles, `clawtower serve`) may attach to one store; the lease makes
sure exactly one of them drives tasks at a time, and a killed holder's work is taken over
when its lease expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid

from . import leases
from .agents.registry import AgentSet
from .aio import wait_event
from .clock import Clock, SystemClock
from .effects import EffectSink
from .orchestrator import Orchestrator
from .store.interface import Store

LEASE_NAME = "orchestrator"


class Engine:
    def __init__(self, store: Store, agents: AgentSet, *, clock: Clock | None = None,
                 effects: EffectSink | None = None, lease_ttl_s: float = 10.0,
                 owner: str | None = None) -> None:
        self.store = store
        self.clock = clock or SystemClock()
        self.orchestrator = Orchestrator(store, agents, clock=self.clock, effects=effects)
        self.lease_ttl_s = lease_ttl_s
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.holding = False
        self._stop = asyncio.Event()

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
            with contextlib.suppress(Exception):
                await leases.release(self.store, LEASE_NAME, self.owner)
