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
    from core.store import SQLiteStore


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = subparsers.add_parser("serve", help="run the engine without a console")
    add_config_option(s, "--agents")
    s.add_argument("--until-idle", action="store_true",
                   help="exit once nothing more can happen without a human")
    s.set_defaults(handler=cmd_serve)


async def engine_until_stopped(store: SQLiteStore, agents: AgentSet, db: str,
                                until_idle: bool, quiet: bool = False) -> int:
    import asyncio

    from core.effects import JournalSink
    from core.engine import Engine

    engine = Engine(store, agents, effects=JournalSink(effects_journal(db)))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, engine.stop)
    done = asyncio.Event()
    follower = asyncio.create_task(print_progress(store, await store.last_seq(), quiet, done))
    runner = asyncio.create_task(engine.run())
    try:
        if until_idle:
            while not engine.holding and not runner.done():
                await asyncio.sleep(0.05)
            idle = await engine.orchestrator.run_until_idle(timeout_s=3600)
            engine.stop()
            if not idle:
                return 1
        await runner
    finally:
        engine.stop()
        await runner
        done.set()
        await follower
    for err in engine.orchestrator.errors:
        sys.stderr.write(f"clawtower: warning: {err}\n")
    return 0


async def print_progress(store: SQLiteStore, seq: int, quiet: bool,
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

    async def run(store: SQLiteStore) -> int:
        print(f"clawtower: engine on {store.path} (agents: {path or 'built-in simulator'});"
              " ctrl+c stops", flush=True)
        return await engine_until_stopped(store, agents, args.db, args.until_idle)

    return await with_store(args, run)
