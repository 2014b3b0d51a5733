"""`clawtower serve`: the engine without a console; and the engine loop `demo --headless`
shares."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from typing import TYPE_CHECKING

from core.config import effects_journal

from . import output
from .common import add_config_option, default_agents_file, load_agents, with_store

if TYPE_CHECKING:
    import asyncio

    from core.agents.registry import AgentSet
    from core.store import Store


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = subparsers.add_parser("serve", help="run the engine without a console")
    add_config_option(s, "--agents")
    s.add_argument("--until-idle", action="store_true",
                   help="exit once nothing more can happen without a human")
    s.set_defaults(handler=cmd_serve)


async def engine_until_stopped(store: Store, agents: AgentSet, db: str,
                                until_idle: bool, quiet: bool = False) -> int:
    import asyncio

    from core.agents.config import load_config
    from core.effects import JournalSink
    from core.engine import Engine
    from core.errors import ClawError
    from core.sessions.runner import SessionRunner

    engine = Engine(store, agents, effects=JournalSink(effects_journal(db)))
    # the session worker (core/sessions) beside the engine: turn jobs of any session
    try:
        sessions: SessionRunner | None = SessionRunner(store, load_config())
    except ClawError as exc:
        sys.stderr.write(f"clawtower: warning: sessions not run: {exc}\n")
        sessions = None
    sessions_stop = asyncio.Event()
    from core.flows.engine import model_engine  # flows (core/flows): stop with the sessions

    flows = model_engine(store, sessions.config) if sessions is not None else None

    def stop() -> None:
        engine.stop()
        sessions_stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop)
    done = asyncio.Event()
    follower = asyncio.create_task(print_progress(store, await store.last_seq(), quiet, done))
    runner = asyncio.create_task(engine.run())
    session_task = asyncio.create_task(sessions.run(sessions_stop)) if sessions else None
    flow_task = asyncio.create_task(flows.run(sessions_stop)) if flows else None
    try:
        if until_idle:
            while not engine.holding and not runner.done():
                await asyncio.sleep(0.05)
            idle = await engine.orchestrator.run_until_idle(timeout_s=3600)
            while sessions is not None and (sessions.running or not await sessions.quiet()):
                await asyncio.sleep(0.05)
            while flows is not None and not await flows.idle():
                await asyncio.sleep(0.05)
            stop()
            if not idle:
                return 1
        await runner
    finally:
        stop()
        await runner
        if session_task is not None:
            await session_task
        if flow_task is not None:
            await flow_task
        done.set()
        await follower
    for err in engine.orchestrator.errors:
        sys.stderr.write(f"clawtower: warning: {err}\n")
    return 0


async def print_progress(store: Store, seq: int, quiet: bool,
                          done: asyncio.Event) -> None:
    """Progress for long work: one line per phase change and approval request."""
    while True:
        finished = done.is_set()  # one last drain after the engine stopped
        for e in await store.events_after(seq, 1000):
            seq = e.seq
            if not quiet and e.type in ("task.transitioned", "approval.requested",
                                        "approval.decided", "lease.acquired"):
                print(output.event_line(e), flush=True)
        if finished:
            return
        await store.wait_for_change(seq, 0.2)


async def cmd_serve(args: argparse.Namespace) -> int:
    path = args.config or default_agents_file()
    # a bad agents file or config fails before the store is opened
    agents = load_agents(path)

    async def run(store: Store) -> int:
        print(f"clawtower: engine on {store.path} (agents: {path or 'built-in simulator'});"
              " ctrl+c stops", flush=True)
        return await engine_until_stopped(store, agents, args.db, args.until_idle)

    return await with_store(args, run)
