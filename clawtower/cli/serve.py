"""`clawtower serve`: the engine without a console; and the engine loop `demo --headless`
shares."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Awaitable, Iterable
from types import FrameType
from typing import TYPE_CHECKING

from clawtower.core.config import effects_journal
from clawtower.core.limits import check_float, check_host, check_int

from . import output
from .boundary import FLOATS, INTS
from .common import (
    add_config_option,
    default_agents_file,
    load_agents,
    say_faults,
    stop_on_signals,
    with_store,
)

if TYPE_CHECKING:
    import asyncio

    from clawtower.core.agents.registry import AgentSet
    from clawtower.core.events import StoredEvent
    from clawtower.core.store import Store
    from clawtower.core.triggers.service import Runtime
    from clawtower.core.workers import ComposedEngine


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = subparsers.add_parser("serve", help="run the engine without a console")
    add_config_option(s, "--agents")
    s.add_argument("--until-idle", action="store_true",
                   help="exit once nothing more can happen without a human")
    s.add_argument("--host", default="127.0.0.1",
                   help="where the webhook server listens (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=None,
                   help="webhook server port (default 8787, a warning if it is taken;"
                   " 0 picks a free one)")
    s.add_argument("--verbose", action="store_true",
                   help="also print machinery: every lease taken (take-overs always show)")
    s.add_argument("--no-http", action="store_true",
                   help="no webhook server (cron, channel triggers and queues still run)")
    s.add_argument("--no-triggers", action="store_true",
                   help="run the engine and sessions only, no trigger runtime")
    s.add_argument("--no-engine", action="store_true",
                   help="run the webhook server only: webhooks are accepted into the store"
                   " and run by another engine on it (a console, or another serve)")
    s.add_argument("--auth-failures", type=int, default=20, metavar="N",
                   help="refused webhook credentials per address and trigger before 429"
                   " (default 20)")
    s.add_argument("--auth-trigger-failures", type=int, default=100, metavar="N",
                   help="refused credentials per trigger from all addresses before every"
                   " address that failed gets 429 (default 100)")
    s.add_argument("--auth-window", type=float, default=60.0, metavar="SECONDS",
                   help="the sliding window those failures are counted in (default 60)")
    s.set_defaults(handler=cmd_serve)


async def engine_until_stopped(store: Store, agents: AgentSet, db: str,
                                until_idle: bool, quiet: bool = False,
                                triggers: Runtime | None = None, verbose: bool = False,
                                workers: Iterable[str] | None = None) -> int:
    """Run the engine (core/workers.py: every protocol's worker, or `workers`) until a
    signal, or with `until_idle` until every worker is idle; `triggers`: the webhook server
    beside it (a front end: it takes work in, the engine's trigger worker runs it)."""
    import asyncio

    from clawtower.core.effects import JournalSink
    from clawtower.core.workers import ALL, build_engine

    def warn(text: str) -> None:
        sys.stderr.write(f"clawtower: warning: {text}\n")

    failed: list[str] = []

    def worker_failed(name: str, exc: BaseException) -> None:
        # a worker that fails stops `serve` (exit 1, for its supervisor to restart it), as
        # the engine failing did: its work would otherwise wait unseen
        warn(f"{name} worker stopped: {exc}")
        failed.append(name)
        stop()

    engine = build_engine(store, agents, workers=ALL if workers is None else workers,
                          effects=JournalSink(effects_journal(db)), warn=warn,
                          on_error=worker_failed)
    say_faults(store)  # a storage fault: serve waits through it, says so, never exits on it
    http_stop = asyncio.Event()

    def stop() -> None:
        engine.stop()
        http_stop.set()

    up = False
    signalled: list[bool] = []

    def stop_by_signal() -> None:
        if not up and not http_stop.is_set():
            print("clawtower: stopped during start-up", flush=True)
        signalled.append(True)
        stop()

    # from here on a signal stops the engine (before: StartupSignals cancels the start-up)
    stop_on_signals(stop_by_signal)
    await startup_hold("engine", http_stop)
    done = asyncio.Event()
    follower = asyncio.create_task(print_progress(store, await store.last_seq(), quiet, done,
                                                  verbose))
    runner = asyncio.create_task(engine.run())
    http_task = None
    if triggers is not None:
        ready = asyncio.Event()
        http_task = asyncio.create_task(triggers.run(http_stop, ready))
        waiter = asyncio.ensure_future(ready.wait())
        await asyncio.wait([waiter, http_task], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if http_task.done():
            stop()
            await runner
            done.set()
            await follower
            http_task.result()  # raises why the webhook server could not start
        for err in triggers.errors:
            warn(err)
        if triggers.http and not http_stop.is_set():
            print(f"clawtower: webhooks on http://{triggers.host}:{triggers.bound_port}"
                  "/hooks/<expert>/<trigger>", flush=True)
    up = True
    try:
        if until_idle:
            idle = await engine.until_idle(timeout_s=3600)
            stop()
            if not idle and not (signalled and not failed):  # a signal: a clean stop
                await runner
                _warnings(engine)
                return 1
        await runner
    finally:
        stop()
        await runner
        if http_task is not None:
            await http_task
        done.set()
        await follower
    _warnings(engine)
    return 1 if failed else 0


def _warnings(engine: ComposedEngine) -> None:
    from clawtower.core.workers import TasksWorker

    for w in engine.workers:  # the task engine's driving errors, as before
        if isinstance(w, TasksWorker):
            for err in w.engine.orchestrator.errors:
                sys.stderr.write(f"clawtower: warning: {err}\n")


async def print_progress(store: Store, seq: int, quiet: bool,
                          done: asyncio.Event, verbose: bool = False) -> None:
    """Progress for long work: one line per phase change and approval request, and a lease
    only when it was taken over from a dead holder (every lease with `verbose`)."""
    while True:
        finished = done.is_set()  # one last drain after the engine stopped
        for e in await store.events_after(seq, 1000):
            seq = e.seq
            if quiet:
                continue
            if _worth_a_line(e, verbose):
                print(output.event_line(e), flush=True)
        if finished:
            return
        await store.wait_for_change(seq, 0.2)


def _worth_a_line(e: StoredEvent, verbose: bool) -> bool:
    if e.type in ("task.transitioned", "approval.requested", "approval.decided"):
        return True
    if e.type in ("workflow.paused", "workflow.resumed"):  # a gate's approval asked or
        p = e.payload  # decided inside them (issue 24.2)
        return getattr(p, "asked", None) is not None or getattr(p, "decided", None) is not None
    return e.type == "lease.acquired" and (
        verbose or getattr(e.payload, "took_over_from", None) is not None)


def cmd_serve(args: argparse.Namespace) -> Awaitable[int]:
    """Not a coroutine: SIGTERM and ctrl+c are caught from here, before anything is imported
    or opened (StartupSignals), then the start-up runs in the event loop."""
    return _serve(args, StartupSignals())


async def _serve(args: argparse.Namespace, signals: StartupSignals) -> int:
    import asyncio

    signals.attach()
    try:
        await startup_hold("parsed")
        return await _start(args)
    except asyncio.CancelledError:
        if signals.signum is None:
            raise
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        print(f"clawtower: stopped by {signal.Signals(signals.signum).name} during start-up",
              flush=True)
        return 0


async def _start(args: argparse.Namespace) -> int:
    # the options, then a bad agents file or config, fail before the store is opened
    check_host(args.host, "--host")  # "" would listen on every interface
    if args.port is not None:
        check_int(args.port, "--port", *INTS["port"])
    check_int(args.auth_failures, "--auth-failures", *INTS["auth_failures"])
    check_int(args.auth_trigger_failures, "--auth-trigger-failures",
              *INTS["auth_trigger_failures"])
    check_float(args.auth_window, "--auth-window", *FLOATS["auth_window"])
    if args.no_engine and (args.no_http or args.no_triggers or args.until_idle):
        from clawtower.core.errors import ValidationError

        raise ValidationError("--no-engine runs the webhook server only: not with --no-http,"
                              " --no-triggers or --until-idle")
    path = args.config or default_agents_file()
    agents = load_agents(path)

    async def run(store: Store) -> int:
        await startup_hold("store")
        from clawtower.core.triggers.ratelimit import FailureLimiter
        from clawtower.core.triggers.service import Runtime

        if args.no_engine:
            print(f"clawtower: webhook server only on {store.path} (no engine: another"
                  " process runs what it accepts); ctrl+c stops", flush=True)
        else:
            agents_of = path or "built-in simulator"
            print(f"clawtower: engine on {store.path} (agents: {agents_of}); ctrl+c stops",
                  flush=True)
        from clawtower.core.workers import ALL

        # the webhook server: a front end beside the engine, not one of its workers (and
        # none with --until-idle, which runs what is already in the store)
        http = not (args.no_triggers or args.no_http or args.until_idle)
        triggers = Runtime(
            store, host=args.host, port=8787 if args.port is None else args.port,
            http=True, http_required=args.port is not None, workers=False,
            limiter=FailureLimiter(args.auth_failures, args.auth_window,
                                   trigger_limit=args.auth_trigger_failures)) if http else None
        workers = [] if args.no_engine else \
            [w for w in ALL if w != "triggers"] if args.no_triggers else ALL
        try:
            return await engine_until_stopped(store, agents, args.db, args.until_idle,
                                              triggers=triggers, verbose=args.verbose,
                                              workers=workers)
        except OSError as exc:
            sys.stderr.write(f"clawtower: {exc}\n")
            return 1

    return await with_store(args, run)


class StartupSignals:
    """SIGTERM and ctrl+c during `serve`'s start-up (imports, opening the store, building the
    engine, loading experts) stop it with exit 0, like a stop once it runs, not the default
    death (exit 143) half-way. Until the loop runs a signal is only recorded; in the loop it
    cancels the start-up at its next await; `stop_on_signals` then takes the signals over
    (both are loop callbacks, so a signal is handled by exactly one of them)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._record)

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum

    def _seen(self, signum: int) -> None:
        self.signum = signum

    def attach(self) -> None:
        """In the loop: a signal from now on cancels the start-up task; one already
        recorded cancels it at once."""
        import asyncio

        task = asyncio.current_task()
        assert task is not None
        stop_on_signals(task.cancel, on_signal=self._seen)
        if self.signum is not None:
            task.cancel()


# Start-up points a test can stop at (CLAWTOWER_SERVE_HOLD=parsed,store,engine): `serve`
# says `clawtower: start-up hold <point>` on stderr there and waits up to 30 s for a signal
# (a cancel, or `stopped` set), so a test sends SIGTERM at a known moment of the start-up
# instead of after a sleep.
HOLD_ENV = "CLAWTOWER_SERVE_HOLD"


async def startup_hold(point: str, stopped: asyncio.Event | None = None) -> None:
    if point not in os.environ.get(HOLD_ENV, "").split(","):
        return
    import asyncio
    import contextlib

    sys.stderr.write(f"clawtower: start-up hold {point}\n")
    sys.stderr.flush()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for((stopped or asyncio.Event()).wait(), 30)
