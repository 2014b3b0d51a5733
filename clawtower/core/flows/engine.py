"""The flow engine: runs agents on ready tasks and applies their outcomes.

Ready-set scheduling: a command that completes a task returns the subtasks it unblocked
(dispatched in that same commit) and, when it was its coordinator's last open subtask, the
coordinator's synthesis; the engine queues exactly those. Nothing rescans a DAG per
completion, so the scheduling work of a flow is O(nodes + edges). A scan of the open tasks
happens only at start (crash recovery), when idle, and about once a second for flows other
processes started.

One engine drives a store's flows at a time: it holds the lease `flows` (renewed every third
of its TTL; a holder whose process is gone from this host is taken over at once). After a
`kill -9` the next engine re-runs the agents of the TASKs still in inboxes and the syntheses
not yet replied; every write is guarded by the task's status in the store, so no subtask is
dispatched twice and no reply is applied twice (a late duplicate is recorded as ignored).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from .. import leases
from ..agents.config import ClawtowerConfig
from ..aio import wait_event
from ..errors import ClawError, StorageFault
from ..liveness import holder_gone, process_tag
from ..sessions.specs import AgentSpec
from ..store.faults import storage_fault
from ..store.interface import Store, WriteTx
from ..store.writer import first_line
from .brains import Brain, ModelBrain
from .plan import delegates
from .replies import Reply, complete_many
from .service import Flows, Outcome, WorkItem, complete, decompose, item_of, take

if TYPE_CHECKING:
    from ..sessions.runner import SessionRunner

LEASE = "flows"




class FlowEngine:
    """Drives every running flow of a store (or only `flows`)."""

    def __init__(self, store: Store, brain: Brain, *, owner: str | None = None,
                 concurrency: int = 64, lease_ttl_s: float = 10.0,
                 progress_after_s: float = 0.05,
                 flows: set[str] | None = None, scan_every_s: float = 1.0,
                 specs: dict[str, AgentSpec] | None = None) -> None:
        self.store = store
        self.brain = brain
        self.owner = owner or f"{process_tag()}#{uuid.uuid4().hex[:6]}"
        self.concurrency = concurrency
        self.lease_ttl_s = lease_ttl_s
        # a turn still running after this shows as running (a `flow.task_taken` event);
        # a faster one goes from dispatched to done in its outcome's commit. A brain whose
        # `work` records its own progress (`records_progress`: a TurnBrain's node session
        # takes the task) gets none once its work starts
        self.progress_after_s = progress_after_s
        self.only = flows
        self.scan_every_s = scan_every_s
        self.api = Flows(store)
        self.queue: deque[WorkItem] = deque()
        self.known: set[str] = set()  # task ids queued or in flight
        self.inflight: dict[asyncio.Task[None], WorkItem] = {}
        self._wake = asyncio.Event()
        # the agent specs by name, refreshed in place at every scan (a ModelBrain shares it)
        self.specs: dict[str, AgentSpec] = specs if specs is not None else {}
        self.errors: list[str] = []
        self.handled = 0
        self.lost = False
        self.on_change: Callable[[], None] | None = None
        # REPLYs of turns that ended in the same pass of the event loop: one command
        self._replies: list[tuple[Reply, asyncio.Future[Outcome]]] = []
        self._committing: set[asyncio.Future[Any]] = set()  # queued, not yet committed

    # ------------------------------------------------------------------ lease

    def _lease(self, tx: WriteTx) -> bool:
        return leases._acquire(tx, LEASE, self.owner, self.lease_ttl_s,
                               holder_gone=holder_gone)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            try:
                held = await self.store.execute(self._lease)
            except StorageFault:
                continue  # the storage failed, not the engine: renew at the next turn
            if not held:
                self.lost = True
                for t in list(self.inflight):
                    t.cancel()
                return

    # ------------------------------------------------------------------ queue

    def _push(self, item: WorkItem) -> None:
        if item.task_id not in self.known:
            self.known.add(item.task_id)
            self.queue.append(item)

    async def _load_specs(self) -> None:
        from ..sessions.registry import _spec_of

        rows = await self.store.fetchall("SELECT * FROM agent_specs")
        fresh = {r["name"]: _spec_of(r) for r in rows}
        self.specs.clear()
        self.specs.update(fresh)

    async def scan(self) -> int:
        """Queue the open work of running flows not queued yet (start, recovery, flows
        started elsewhere). Returns how many items it added."""
        await self._load_specs()
        rows = await self.store.fetchall(
            "SELECT t.*, f.split AS flow_split FROM flows f JOIN flow_tasks t ON"
            " t.flow_id=f.id AND t.status IN ('dispatched', 'running', 'synthesizing')"
            " WHERE f.status='running'")
        added = 0
        for r in rows:
            if self.only is not None and r["flow_id"] not in self.only:
                continue
            if r["task_id"] in self.known:
                continue
            kind = "synth" if r["status"] == "synthesizing" else "task"
            self._push(item_of(r, kind, split=bool(r["flow_split"])))
            added += 1
        return added

    # ------------------------------------------------------------------ running

    async def run(self, stop: asyncio.Event | None = None, *, until_idle: bool = False,
                  timeout_s: float = 3600.0) -> bool:
        """Drive flows until `stop` is set (or, with `until_idle`, until no flow has work
        left). False when the time ran out or the lease was lost."""
        stop = stop or asyncio.Event()
        serving = getattr(self.brain, "serving", None)  # a TurnBrain: its session worker
        async with serving() if serving is not None else contextlib.nullcontext():
            return await self._run(stop, until_idle, timeout_s)

    async def _run(self, stop: asyncio.Event, until_idle: bool, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not await self.store.execute(self._lease):
            if until_idle and not await self._any_work():
                return True
            if stop.is_set() or time.monotonic() > deadline:
                return False
            await wait_event(stop, min(1.0, self.lease_ttl_s / 3))
        renew = asyncio.create_task(self._renew())
        try:
            await self.scan()
            last_scan = time.monotonic()
            while not stop.is_set() and not self.lost:
                if time.monotonic() > deadline:
                    return False
                while self.queue and len(self.inflight) < self.concurrency:
                    item = self.queue.popleft()
                    task = asyncio.create_task(self._handle(item))
                    self.inflight[task] = item
                    task.add_done_callback(self._ended)
                if not self.inflight:
                    seq = await self.store.last_seq()
                    if await self.scan():
                        continue
                    if until_idle:
                        return True
                    await self.store.wait_for_change(seq, 0.5)
                    await self.scan()
                    last_scan = time.monotonic()
                    continue
                # woken by any handler's end (one callback per task, not a wait over all
                # of them per completion: O(1) per node)
                self._wake.clear()
                if not (self.queue and len(self.inflight) < self.concurrency):
                    await wait_event(self._wake, self.scan_every_s)
                if time.monotonic() - last_scan > self.scan_every_s:
                    await self.scan()
                    last_scan = time.monotonic()
            return not self.lost
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renew
            for t in list(self.inflight):
                t.cancel()
            if self.inflight:
                await asyncio.wait(list(self.inflight))
            self.inflight.clear()
            self._flush_replies()  # the replies of cancelled turns still commit, as before
            while self._committing:  # (a failed batch queues its replies one by one)
                await asyncio.wait(list(self._committing))
            if not self.lost:
                with contextlib.suppress(ClawError):
                    await leases.release(self.store, LEASE, self.owner)

    def _ended(self, task: asyncio.Task[None]) -> None:
        item = self.inflight.pop(task, None)
        if item is not None:
            self.known.discard(item.task_id)
            if not task.cancelled() and task.exception() is not None:
                self.errors.append(f"{item.task_id}: {task.exception()!r}")
        self._wake.set()

    async def idle(self) -> bool:
        """Nothing in flight here and no running flow (of `only`, when set) with work left
        in the store, whoever drives it."""
        return not self.inflight and not self.queue and not await self._any_work()

    async def _any_work(self) -> bool:
        sql = ("SELECT t.flow_id FROM flows f JOIN flow_tasks t ON t.flow_id=f.id AND t.status"
               " IN ('dispatched', 'running', 'synthesizing') WHERE f.status='running'")
        if self.only is None:
            return await self.store.fetchone(sql + " LIMIT 1") is not None
        only = sorted(self.only)
        if not only:
            return False
        row = await self.store.fetchone(
            sql + f" AND f.id IN ({','.join('?' * len(only))}) LIMIT 1", tuple(only))
        return row is not None

    async def run_flow(self, flow_id: str, timeout_s: float = 3600.0) -> dict[str, Any]:
        """Drive one flow to its end; returns its row."""
        self.only = {flow_id} if self.only is None else self.only | {flow_id}
        await self.run(until_idle=True, timeout_s=timeout_s)
        flow: dict[str, Any] = (await self.api.get(flow_id))["flow"]
        return flow

    async def _handle(self, item: WorkItem) -> None:
        try:
            out = await self._outcome(item)
        except asyncio.CancelledError:
            return
        except Exception as exc:
            if storage_fault(exc) is None:
                raise
            # the storage failed, not the task: nothing was recorded; the task stays open
            # in the store and a later scan queues it again, after this pause
            await asyncio.sleep(self.scan_every_s)
            return
        self.handled += 1
        for nxt in out.items:
            self._push(nxt)
        if out.finished or (out.ignored and "cancelled" in out.ignored):
            self._cancel_flow(item.flow_id)
        if self.on_change is not None:
            self.on_change()

    def _cancel_flow(self, flow_id: str) -> None:
        """Fail-fast: siblings still running in this flow are cancelled (their late
        replies, if any were about to be written, are recorded as ignored)."""
        me = asyncio.current_task()
        for t, it in list(self.inflight.items()):
            if it.flow_id == flow_id and t is not me:
                t.cancel()
        self.queue = deque(i for i in self.queue if i.flow_id != flow_id)

    async def _outcome(self, item: WorkItem) -> Outcome:
        tid = item.task_id
        try:
            if item.kind == "synth":
                replies = await self.store.fetchall(
                    "SELECT local_id, agent, result FROM flow_tasks WHERE parent_id=?"
                    " ORDER BY ord", (tid,))
                ans = await self.brain.synthesize(item, replies)
                return await self.store.execute(
                    lambda tx: complete(tx, tid, True, ans.text, "synthesis", ans.tokens))
            timer = asyncio.get_running_loop().call_later(
                self.progress_after_s, lambda: self.store.submit(lambda tx: take(tx, item)))
            try:
                spec = self.specs.get(item.agent)
                allowed = delegates(spec, self.specs) if spec is not None else []
                decision = await self.brain.decide(item, allowed)
                if decision.action == "decompose":
                    timer.cancel()
                    subs = decision.subtasks
                    return await self.store.execute(
                        lambda tx: decompose(tx, tid, subs, decision.tokens))
                if getattr(self.brain, "records_progress", False):
                    timer.cancel()  # its work says when the task is taken (a TurnBrain)
                ans = await self.brain.work(item)
            finally:
                timer.cancel()
            return await self._reply(Reply(tid, ans.text, "execute",
                                           ans.tokens + decision.tokens))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the agent failed: its task fails, the ERROR climbs
            if storage_fault(exc) is not None:
                raise  # the storage failed, not the agent: the task stays open (_handle)
            if not isinstance(exc, ClawError):
                self.errors.append(f"{tid}: {type(exc).__name__}: {exc}")
            reason = first_line(exc)
            return await self.store.execute(
                lambda tx: complete(tx, tid, False, reason, "failed"))


    # ------------------------------------------------------------------ replies

    async def _reply(self, reply: Reply) -> Outcome:
        """Commit `reply` with the others of this pass of the event loop (one command, so
        one savepoint and one of each read for all of them); returns its outcome once
        committed. As with `store.execute`, a cancelled caller does not cancel the write:
        the reply is queued already, only its answer is dropped."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Outcome] = loop.create_future()
        fut.add_done_callback(_consume)  # its caller may be gone (cancelled) by then
        self._replies.append((reply, fut))
        if len(self._replies) == 1:
            loop.call_soon(self._flush_replies)
        return await fut

    def _flush_replies(self) -> None:
        """Queue the collected replies as one command (no task of its own: the answers are
        handed out from the commit's callback)."""
        batch, self._replies = self._replies, []
        if batch:  # else flushed already (the engine stopping)
            self._submit(partial(_complete_batch, [r for r, _ in batch]),
                         partial(self._batch_done, batch))

    def _submit(self, command: Callable[[WriteTx], Any],
                done: Callable[[asyncio.Future[Any]], None]) -> None:
        try:
            fut = self.store.submit(command)
        except Exception as exc:  # the store closed: nothing was queued
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(exc)
        self._committing.add(fut)
        fut.add_done_callback(self._committing.discard)
        fut.add_done_callback(done)

    def _batch_done(self, batch: list[tuple[Reply, asyncio.Future[Outcome]]],
                    fut: asyncio.Future[list[Outcome]]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            # one reply's failure fails no other: each alone, as before the batching
            for reply, waiter in batch:
                self._submit(partial(_complete_one, reply), partial(_settle, waiter))
            return
        for (_, waiter), out in zip(batch, fut.result(), strict=True):
            if not waiter.done():
                waiter.set_result(out)


def _settle(waiter: asyncio.Future[Outcome], fut: asyncio.Future[Outcome]) -> None:
    if waiter.done():
        return
    if fut.cancelled():
        waiter.cancel()
    elif (exc := fut.exception()) is not None:
        waiter.set_exception(exc)
    else:
        waiter.set_result(fut.result())


def _consume(fut: asyncio.Future[Outcome]) -> None:
    if not fut.cancelled():
        fut.exception()


def _complete_one(reply: Reply, tx: WriteTx) -> Outcome:
    return complete(tx, reply.task_id, True, reply.body, reply.mode, reply.tokens)


def _complete_batch(replies: list[Reply], tx: WriteTx) -> list[Outcome]:
    return complete_many(tx, replies)


def model_engine(store: Store, config: ClawtowerConfig, *,
                 runner: SessionRunner | None = None, **kw: Any) -> FlowEngine:
    """The engine the CLI, `serve`, the console and the demo run: decisions and syntheses
    by the agents' own models (`ModelBrain`), every executed node a TurnJob in a session of
    its agent (`TurnBrain`). `runner`: the session worker already running in this process
    (`serve`, the console); without one the engine runs its own for its nodes' sessions."""
    from .turns import TurnBrain

    specs: dict[str, AgentSpec] = {}
    brain = TurnBrain(store, ModelBrain(store, config, specs), config=config, runner=runner)
    return FlowEngine(store, brain, specs=specs, **kw)


__all__ = ["LEASE", "FlowEngine", "holder_gone", "model_engine"]
