"""The engine: an orchestrator that drives its share of the store's work.

Several processes (consoles, `clawtower serve`, on one machine or many) may attach to one
store. They divide the work instead of taking turns: each engine claims a task with a lease
of its own (`task:T-N`, core/orchestrator.py) before driving it and a workflow run with the
run's lease (`workflow:W-N`, core/workflows/service.py), so N engines drive N tasks at once,
and a killed engine's tasks and runs are taken over by live engines once their leases expire.
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
from .aio import unless_set, wait_event
from .clock import Clock, SystemClock
from .effects import EffectSink
from .errors import Conflict, ValidationError
from .meetings.coordinator import _ADOPTED_AWAY
from .meetings.service import Meetings
from .orchestrator import Orchestrator
from .store.interface import Store
from .workflows.service import Workflows

#: how many workflow runs one engine drives at once (the rest are left to other engines)
MAX_RUNS = 32
#: the adoption sweep runs at most this often while the store changes
SWEEP_MIN_S = 0.2
#: on stop, how long runs in flight get to reach a step boundary before they are left
HANDOVER_S = 5.0


def presence_lease(owner: str) -> str:
    """The lease an engine renews while it runs (`engine:<owner>`): who drives, for a console
    that shows whether an engine runs elsewhere; work is claimed per task and run."""
    return f"engine:{owner}"


class Engine:
    def __init__(self, store: Store, agents: AgentSet, *, clock: Clock | None = None,
                 effects: EffectSink | None = None, lease_ttl_s: float = 10.0,
                 owner: str | None = None, workflows: Workflows | None = None,
                 concurrency: int = 16, max_runs: int = MAX_RUNS,
                 handover_s: float = HANDOVER_S) -> None:
        self.store = store
        self.clock = clock or SystemClock()
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lease_ttl_s = lease_ttl_s
        self.orchestrator = Orchestrator(store, agents, clock=self.clock, effects=effects,
                                         concurrency=concurrency, owner=self.owner,
                                         lease_ttl_s=lease_ttl_s)
        self.max_runs = max_runs
        self.handover_s = handover_s
        # True while the engine runs (it drives its share: there is no standby any more)
        self.holding = False
        self._stop = asyncio.Event()
        # adopted workflow runs: driven here, warnings kept out of a console's screen
        self.workflows = workflows or Workflows(store, actor="engine",
                                                stderr=lambda _text: None,
                                                lease_ttl_s=lease_ttl_s)
        self.adopted: dict[str, asyncio.Task[Any]] = {}
        self.adoption_errors: collections.deque[str] = collections.deque(maxlen=50)
        self.agents = agents
        # meetings this engine cannot run (their agents are not in its agents file)
        self._unrunnable: set[str] = set()

    def stop(self) -> None:
        """Stop: tasks are released; workflow runs are handed over at their next step
        boundary (waited for up to `handover_s`; a step still running then is left
        interrupted, as a kill -9 leaves it), so another engine drives them on."""
        self.workflows.hand_over()
        self._stop.set()

    async def run(self) -> None:
        """Drive claimed tasks and adopt free workflow runs and orphaned meetings until
        stopped; on stop, release
        what this engine holds (a killed engine's leases expire instead)."""
        drive_stop = asyncio.Event()
        driver = asyncio.create_task(self.orchestrator.run(drive_stop))
        self.holding = True
        presence = presence_lease(self.owner)
        renew_at = 0.0
        loop = asyncio.get_running_loop()
        try:
            seq = await self.store.last_seq()
            while not self._stop.is_set() and not driver.done():
                if loop.time() >= renew_at:
                    with contextlib.suppress(Exception):  # the server may be away: next round
                        await leases.acquire(self.store, presence, self.owner, self.lease_ttl_s)
                        renew_at = loop.time() + self.lease_ttl_s / 3
                await self._adopt_runs()
                await self._adopt_meetings()
                now = await unless_set(self._stop, self.store.wait_for_change(
                    seq, max(0.0, min(self.lease_ttl_s / 3, renew_at - loop.time()))))
                if now is not None:
                    seq = now
                    await wait_event(self._stop, SWEEP_MIN_S)
        finally:
            self.holding = False
            drive_stop.set()
            with contextlib.suppress(Exception):
                await driver
            self.workflows.hand_over()  # also when stopped by a cancel, not by stop()
            for key, t in self.adopted.items():  # adopted meetings are handed over, not ended:
                if key.startswith("meeting:") and not t.done():  # their lease lapses for
                    _ADOPTED_AWAY.add(t)  # the next engine, which goes on from there
                    t.cancel()
            running = [t for t in self.adopted.values() if not t.done()]
            if running:
                _, late = await asyncio.wait(running, timeout=self.handover_s)
                for task in late:
                    task.cancel()
            await asyncio.gather(*self.adopted.values(), return_exceptions=True)
            with contextlib.suppress(Exception):
                await leases.release(self.store, presence, self.owner)

    async def idle(self) -> str:
        """"idle" when nothing this engine owns can move without a human: no task in flight
        or ready, no adopted run or meeting still running, no workflow run or meeting that
        is free to adopt (one whose agents are not in this engine's agents file does not
        count); "stuck" when idle but for tasks that keep failing; else "busy"."""
        if any(not t.done() for t in self.adopted.values()):
            return "busy"
        tasks = await self.orchestrator.state()
        if tasks == "busy" or await self.workflows.adoptable():
            return "busy"
        meetings = await Meetings(self.store).list()
        if any(m["orphaned"] and m["id"] not in self._unrunnable for m in meetings):
            return "busy"
        return tasks

    async def _adopt_runs(self) -> None:
        """Start driving each workflow run nobody drives (its driver died)."""
        self.adopted = {k: t for k, t in self.adopted.items() if not t.done()}
        try:
            orphans = await self.workflows.adoptable()
        except Exception as exc:  # the store keeps the truth; try again next tick
            self.adoption_errors.append(f"adoption sweep: {exc}")
            return
        for run_id in orphans:
            if len(self.adopted) >= self.max_runs:
                break  # a fair share: the rest are left to other engines
            if run_id not in self.adopted:
                self.adopted[run_id] = asyncio.create_task(self._adopt(run_id),
                                                           name=f"adopt-{run_id}")

    async def _adopt_meetings(self) -> None:
        """Continue each meeting nobody runs (its process died), as runs are adopted: from
        its last recorded step, under its lease (core/meetings/coordinator.py)."""
        meetings = Meetings(self.store)
        try:
            orphans = [m["id"] for m in await meetings.list() if m["orphaned"]]
        except Exception as exc:  # the store keeps the truth; try again next tick
            self.adoption_errors.append(f"meeting adoption sweep: {exc}")
            return
        for mid in orphans:
            key = f"meeting:{mid}"
            if len(self.adopted) >= self.max_runs:
                break
            if key not in self.adopted and mid not in self._unrunnable:
                self.adopted[key] = asyncio.create_task(self._adopt_meeting(meetings, mid),
                                                        name=f"adopt-{key}")

    async def _adopt_meeting(self, meetings: Meetings, mid: str) -> None:
        try:
            await meetings.adopt(self.agents, mid)
        except ValidationError as exc:  # not ours to run: another engine's agents may be
            self._unrunnable.add(mid)
            self.adoption_errors.append(f"{mid}: {exc}")
        except Conflict as exc:  # another engine adopted it first
            self.adoption_errors.append(f"{mid}: {exc}")
        except Exception as exc:  # recorded; the meeting's lease lapses for the next try
            self.adoption_errors.append(f"{mid}: {exc}")

    async def _adopt(self, run_id: str) -> None:
        try:
            envelope = await self.workflows.adopt(run_id)
        except Exception as exc:  # e.g. another process adopted it first (a Conflict)
            self.adoption_errors.append(f"{run_id}: {exc}")
            return
        if not envelope.get("ok"):
            self.adoption_errors.append(f"{run_id}: {envelope['error']['message']}")
