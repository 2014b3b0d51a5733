"""Helpers for the session tests: a recording provider, a gated tool box, a gated model,
and a runner factory on the simulator."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from clawtower.core.agents.config import ClawtowerConfig, config_from_data
from clawtower.core.agents.provider import ChatRequest, StreamEvent, ToolSpec
from clawtower.core.agents.simulator import Simulator
from clawtower.core.sessions.runner import SessionRunner
from clawtower.core.sessions.service import SessionLimits, Sessions
from clawtower.core.sessions.skills import SkillSet
from clawtower.core.sessions.specs import AgentSpecConfig
from clawtower.core.tools.registry import ToolRegistry
from clawtower.core.tools.types import ToolResult


class Recording:
    """A provider that records every request, then answers like the simulator. With
    `hold=True` its next call waits until `release` is set (a model mid-call)."""

    name = "simulator"

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.requests: list[ChatRequest] = []
        self.hold = False
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        if self.hold:
            self.hold = False
            self.entered.set()
            await self.release.wait()
        async for e in self.sim.stream(request):
            yield e

    def tools_seen(self, i: int = -1) -> list[str]:
        return sorted(t.name.replace("__", ".") for t in self.requests[i].tools)


class GatedBox:
    """Tool box of one agent: the registry's, but call number `gate_at` (1-based, over the
    whole test) waits until `release` is set."""

    def __init__(self, owner: GatedRegistry, inner: Any) -> None:
        self.owner = owner
        self.inner = inner

    async def specs(self) -> list[ToolSpec]:
        specs: list[ToolSpec] = await self.inner.specs()
        return specs

    async def resolve(self, name: str) -> str | ToolResult:
        resolved: str | ToolResult = await self.inner.resolve(name)
        return resolved

    async def call(self, name: str, arguments: str) -> ToolResult:
        o = self.owner
        o.calls.append((name, arguments))
        if len(o.calls) == o.gate_at:
            o.reached.set()
            await o.release.wait()
        result: ToolResult = await self.inner.call(name, arguments)
        return result


class GatedRegistry:
    def __init__(self, store: Any, gate_at: int = 0) -> None:
        self.real = ToolRegistry(store)
        self.gate_at = gate_at
        self.calls: list[tuple[str, str]] = []
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    def toolbox(self, allow: Any = None, deny: Any = (), *, agent: str = "agent",
                progress: Any = None) -> GatedBox:
        return GatedBox(self, self.real.toolbox(allow, deny, agent=agent))

    async def aclose(self) -> None:
        await self.real.aclose()


def sim_config(extra: dict[str, Any] | None = None) -> ClawtowerConfig:
    return config_from_data({"speed": 0, **(extra or {})}, "test")


def runner(store: Any, cfg: ClawtowerConfig | None = None, *, registry: Any = None,
           skills: SkillSet | None = None, limits: SessionLimits | None = None,
           recording: bool = True, **kw: Any) -> tuple[SessionRunner, Recording]:
    cfg = cfg or sim_config()
    rec = Recording(Simulator(cfg.script))
    if recording:
        cfg._built["simulator"] = rec
    r = SessionRunner(store, cfg, registry=registry if registry is not None else
                      ToolRegistry(store), skills=skills or SkillSet(), limits=limits, **kw)
    return r, rec


async def run_idle(store: Any, sid: str, timeout: float = 30.0, **kw: Any) -> None:
    """A fresh simulator worker runs `sid` (and its children) until it is quiet, then
    closes (a worker of its own each time, as another process would be)."""
    r, _ = runner(store, **kw)
    try:
        assert await r.run_until_idle(timeout, {sid}), r.errors
    finally:
        await r.aclose()


async def spec(sessions: Sessions, name: str, **config: Any) -> str:
    return await sessions.set_spec(name, AgentSpecConfig.model_validate(config))


async def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    """Wait (generously) until `await predicate()` is truthy."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def running(r: SessionRunner, sid: str) -> AsyncIterator[None]:
    """`r.run()` in the background for the block; leaving it waits until `sid` (and its
    children) is quiet, then stops the runner."""
    stop = asyncio.Event()
    task = asyncio.create_task(r.run(stop))
    try:
        yield
        await wait_for(lambda: r.quiet({sid}))
    finally:
        stop.set()
        await task


def texts(session: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["role"], m["text"]) for m in session["messages"]]


async def event_types(store: Any, type_: str) -> list[Any]:
    rows = await store.fetchall("SELECT * FROM events WHERE type=? ORDER BY seq", (type_,))
    return [{**r, "payload": json.loads(r["payload"])} for r in rows]


def record_commands(store: Any) -> list[list[str]]:
    """From now on, the event types each store command writes, one list per command in
    the order they were queued (`store.execute` wrapped): what a test asserts to say that
    facts were written in one commit. A `session.created` carrying its job's start (issue
    36) is recorded as `session.created+start`."""
    commands: list[list[str]] = []
    real_execute = store.execute

    class Recorded:
        def __init__(self, tx: Any, types: list[str]) -> None:
            self._tx, self._types = tx, types

        def __getattr__(self, name: str) -> Any:
            return getattr(self._tx, name)

        def emit(self, event: Any) -> Any:
            folded = getattr(event.payload, "start", None) is not None
            self._types.append(event.payload.TYPE + ("+start" if folded else ""))
            return self._tx.emit(event)

    async def execute(command: Any) -> Any:
        types: list[str] = []
        commands.append(types)
        return await real_execute(lambda tx: command(Recorded(tx, types)))

    store.execute = execute
    return commands
