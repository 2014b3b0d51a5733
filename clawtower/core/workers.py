"""One engine, one registration point: every protocol's worker behind one small interface,
composed by `build_engine` for every front end (`serve`, `serve --until-idle`, the console,
`flow work`, `flow run --wait`, `session run`, `session send`, the demo's seeding).

    front end (cli/serve.py, tui/workers.py)
      -> ComposedEngine (this module): run, stop, idle, until_idle
         -> workers: tasks (core/engine.py: tasks, workflow-run and meeting adoption),
                     sessions (core/sessions/runner.py: turn jobs, ACP recovery),
                     flows (core/flows/engine.py), triggers (core/triggers/background.py:
                     queue worker, cron, channels), traces (core/traces/live.py: live
                     OTLP export, when configured)
            -> store

A worker claims its work with leases of its own, so engines in several processes (a console
beside a `serve`) divide the work. While the engine runs, the store holds writes through
storage faults (a full disk, a read-only file, a lost PostgreSQL server: core/store/faults.py):
a write waits and lands once the storage takes writes again, so no worker fails its work
or exits on one; stopping the engine stops holding, so a stop never hangs on a disk.
"Idle" means every registered worker is idle: nothing it owns can still move without a
human. The webhook HTTP server is not a worker: it takes work
in, and stays the front end's (`serve`).

Protocol modules are imported only when their worker is built (start-up cost, and no cycle:
no protocol module imports this one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from .aio import wait_event
from .errors import ClawError, StorageFault
from .store.faults import Backoff

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .agents.config import ClawtowerConfig
    from .agents.registry import AgentSet
    from .clock import Clock
    from .effects import EffectSink
    from .engine import Engine
    from .flows.engine import FlowEngine
    from .sessions.claims import TextSink
    from .sessions.runner import SessionRunner
    from .store.interface import Store
    from .triggers.background import TriggerWorkers
    from .triggers.worker import Executor

#: every worker, in start order (the session worker before the flows whose nodes it runs);
#: "traces" is built only when clawtower.yaml's `telemetry.otlp_endpoint` is set
ALL = ("tasks", "sessions", "flows", "triggers", "traces")


class Worker(Protocol):
    """One protocol's worker: claims its work (leases keep processes apart), runs it, adopts
    what a dead process left, wakes on a store change, and says whether it is idle."""

    name: str

    async def run(self, stop: asyncio.Event) -> Any:
        """Until `stop` is set (or `stop()` is called); then hand over what it holds."""

    async def idle(self) -> bool:
        """Nothing it owns can still move without a human: no ready item it could claim,
        nothing in flight."""

    def stop(self) -> None:
        """Stop claiming and hand over (runs in flight end or are left for the next)."""


class TasksWorker:
    """Tasks, the adoption of workflow runs and of orphaned meetings (core/engine.py)."""

    name = "tasks"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.stuck = False  # idle only because every remaining task keeps failing

    async def run(self, stop: asyncio.Event) -> None:
        relay = asyncio.create_task(_relay(stop, self.engine.stop))
        try:
            await self.engine.run()
        finally:
            relay.cancel()

    def stop(self) -> None:
        self.engine.stop()

    async def idle(self) -> bool:
        state = await self.engine.idle()
        self.stuck = state == "stuck"  # every remaining task keeps failing: say so, don't spin
        return state != "busy"


class SessionsWorker:
    """Session turn jobs, and ACP runs a dead process left (core/sessions/runner.py)."""

    name = "sessions"

    def __init__(self, runner: SessionRunner) -> None:
        self.runner = runner

    async def run(self, stop: asyncio.Event) -> None:
        await self.runner.run(stop)

    def stop(self) -> None:
        self.runner.stop()

    async def idle(self) -> bool:
        return not self.runner.running and await self.runner.quiet(self.runner.only)


class FlowsWorker:
    """Running flows, while this process holds the `flows` lease (core/flows/engine.py)."""

    name = "flows"

    def __init__(self, flows: FlowEngine) -> None:
        self.flows = flows
        self.ok = True  # False: its lease was lost (another engine drives the flows now)
        self._stop = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        relay = asyncio.create_task(_relay(stop, self._stop.set))
        try:
            self.ok = await self.flows.run(self._stop, timeout_s=365 * 24 * 3600.0)
        finally:
            relay.cancel()

    def stop(self) -> None:
        self._stop.set()

    async def idle(self) -> bool:
        return await self.flows.idle()


async def _relay(stop: asyncio.Event, then: Callable[[], None]) -> None:
    await stop.wait()
    then()


class ComposedEngine:
    """The workers of one process, run, stopped and asked for idleness together. A worker
    that fails is reported (`on_error`, `errors`) and the others go on: the store keeps the
    truth, and another engine (or this one's next start) takes its work."""

    def __init__(self, store: Store, workers: list[Worker], *,
                 on_error: Callable[[str, BaseException], None] | None = None) -> None:
        self.store = store
        self.workers = workers
        self.on_error = on_error
        self.errors: list[str] = []
        self._stop = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[Any]] = {}

    def get(self, name: str) -> Worker | None:
        return next((w for w in self.workers if w.name == name), None)

    def stop(self) -> None:
        """Every worker stops and hands over (each in its own way: tasks released, runs
        handed over at a step boundary, trigger runs in flight drained)."""
        self._stop.set()
        self.store.set_hold(False)  # writes waiting on a storage fault fail: handover goes on
        for w in self.workers:
            w.stop()

    async def run(self) -> None:
        """Run every worker until `stop()` (with none, `serve --no-engine`: wait for it)."""
        if self.workers:
            self.store.set_hold(True)
        for w in self.workers:
            self._tasks[w.name] = asyncio.create_task(self._guarded(w), name=f"engine-{w.name}")
            await asyncio.sleep(0)  # in order: the session worker starts before the flows
        try:
            await asyncio.gather(*self._tasks.values())
            if not self.workers:
                await self._stop.wait()
        finally:
            self.stop()
            for t in self._tasks.values():
                if not t.done():
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        await t

    async def _guarded(self, w: Worker) -> None:
        backoff = Backoff(first=0.5, cap=10.0)
        while True:
            try:
                await w.run(self._stop)
                return
            except asyncio.CancelledError:
                raise
            except StorageFault as exc:  # the storage's fault, never the worker's: go on
                if self._stop.is_set():
                    return  # stopping: what it held is left for the next engine
                log.warning("%s worker: %s; starting it again", w.name, exc)
                await wait_event(self._stop, backoff.next())
                if self._stop.is_set():
                    return
            except Exception as exc:
                self.errors.append(f"{w.name} worker stopped: {exc}")
                if self.on_error is not None:
                    self.on_error(w.name, exc)
                return

    def running(self, name: str) -> bool:
        t = self._tasks.get(name)
        return t is not None and not t.done()

    async def idle(self) -> bool:
        """Every running worker is idle, on one unchanged store position, and no write is
        held on a storage fault (it lands once the storage takes writes again)."""
        if self.store.fault is not None:
            return False
        seq = await self.store.last_seq()
        for w in self.workers:
            task = self._tasks.get(w.name)
            if task is None:  # not started yet (run() starts them in order): not idle
                return False
            if not task.done() and not await w.idle():
                return False
        return await self.store.last_seq() == seq

    async def run_until_idle(self, timeout_s: float = 3600.0) -> bool:
        """Run every worker until every one is idle (`until_idle`), then stop them all."""
        task = asyncio.create_task(self.run(), name="engine")
        try:
            return await self.until_idle(timeout_s)
        finally:
            self.stop()
            await task

    async def until_idle(self, timeout_s: float = 3600.0) -> bool:
        """Wait until every worker is idle. False on timeout, or when it is idle only because
        every remaining task keeps failing (the tasks worker's `stuck`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self._stop.is_set():
            seq = await self.store.last_seq()
            if await self.idle():
                return not any(getattr(w, "stuck", False) for w in self.workers)
            if loop.time() > deadline:
                return False
            await self.store.wait_for_change(seq, 0.1)
        return False


def build_engine(store: Store, agents: AgentSet | None, *, workers: Iterable[str] = ALL,
                 config: ClawtowerConfig | None = None,
                 flow_config: ClawtowerConfig | None = None,
                 effects: EffectSink | None = None, clock: Clock | None = None,
                 on_text: TextSink | None = None,
                 trigger_executor: Executor | None = None, trigger_capacity: int = 8,
                 on_error: Callable[[str, BaseException], None] | None = None,
                 warn: Callable[[str], None] | None = None,
                 session_kw: Mapping[str, Any] | None = None,
                 flow_kw: Mapping[str, Any] | None = None) -> ComposedEngine:
    """The engine every front end runs: `workers` a selection of `ALL` (the default: all).
    `config`: the sessions' (default: `load_config()`); `flow_config`: the flows' when it
    differs (the flows then run their own session worker for their nodes). A config that
    does not load leaves the sessions and flows out, with a `warn`. `agents` is needed by
    the tasks worker only; `session_kw`, `flow_kw`: options of those workers (e.g.
    `max_concurrent`, `concurrency`)."""
    chosen = set(workers)
    unknown = chosen - set(ALL)
    if unknown:
        raise ValueError(f"unknown workers: {sorted(unknown)}")
    out: list[Worker] = []
    if "tasks" in chosen:
        from .engine import Engine

        if agents is None:
            raise ValueError("the tasks worker needs an agent set")
        out.append(TasksWorker(Engine(store, agents, clock=clock, effects=effects)))
    runner: SessionRunner | None = None
    if chosen & {"sessions", "flows"}:
        try:
            from .agents.config import load_config

            config = config if config is not None else load_config()
        except ClawError as exc:
            if warn is not None:
                warn(f"sessions not run: {exc}")
            chosen -= {"sessions", "flows"}
    if "sessions" in chosen:
        from .sessions.runner import SessionRunner

        assert config is not None
        runner = SessionRunner(store, config, on_text=on_text, **(session_kw or {}))
        out.append(SessionsWorker(runner))
    if "flows" in chosen:
        from .flows.engine import model_engine

        assert config is not None
        shared = runner if flow_config is None else None
        out.append(FlowsWorker(model_engine(store, flow_config or config, runner=shared,
                                            **(flow_kw or {}))))
    if "triggers" in chosen:
        from .triggers.background import TriggerWorkers

        triggers: TriggerWorkers = TriggerWorkers(store, capacity=trigger_capacity,
                                                  clock=clock, executor=trigger_executor)
        out.append(triggers)
    if "traces" in chosen:
        project = None
        try:
            from .agents.config import load_config

            project = config if config is not None else load_config()
        except ClawError as exc:
            if warn is not None:
                warn(f"traces not exported: {exc}")
        if project is not None and project.telemetry.otlp_endpoint:
            from .traces.live import TracesWorker
            from .traces.redact import config_redactor

            out.append(TracesWorker(store, project.telemetry,
                                    redact=config_redactor(project)))
    return ComposedEngine(store, out, on_error=on_error)


__all__ = ["ALL", "ComposedEngine", "FlowsWorker", "SessionsWorker", "TasksWorker", "Worker",
           "build_engine"]
