"""The trigger runtime as `clawtower serve` runs it: the webhook server and (unless
`workers=False`: the engine runs them, core/workers.py) the cron scheduler, the channel
watcher and the worker (core/triggers/background.py), until `stop` is set (SIGTERM).

Everything they share is store state, so any number of these (and consoles) can run on one
store; a stop lets in-flight runs end as interrupted, and whatever was queued stays queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from ..clock import Clock
from ..store.interface import Store
from .background import TriggerWorkers
from .catalog import Catalog
from .ratelimit import FailureLimiter
from .webhook import build_app
from .worker import Executor, Worker


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: `serve` owns SIGTERM/SIGINT and stops the
    server with everything else."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def _serve(server: _Server) -> None:
    """uvicorn ends a failed start-up (the port in use) with sys.exit(3), which asyncio lets
    out of the event loop as a traceback: here it ends the task, seen as not started."""
    with contextlib.suppress(SystemExit):
        await server.serve()


@dataclass
class Runtime:
    store: Store
    host: str = "127.0.0.1"
    port: int = 8787
    http: bool = True
    http_required: bool = True  # False: a port in use is a warning, the rest still runs
    capacity: int = 8
    clock: Clock | None = None
    executor: Executor | None = None
    catalog: Catalog = field(default_factory=Catalog)
    limiter: FailureLimiter = field(default_factory=FailureLimiter)
    bound_port: int | None = None
    worker: Worker | None = None
    errors: list[str] = field(default_factory=list)
    workers: bool = True  # False: the webhook server only


    async def run(self, stop: asyncio.Event, ready: asyncio.Event | None = None) -> None:
        background = TriggerWorkers(self.store, capacity=self.capacity, clock=self.clock,
                                    executor=self.executor, catalog=self.catalog) \
            if self.workers else None
        tasks: list[asyncio.Task[Any]] = [] if background is None else [
            asyncio.create_task(background.run(stop), name="trigger-workers")]
        await asyncio.sleep(0)  # the worker is built when its task starts
        self.worker = None if background is None else background.worker
        server: _Server | None = None
        if self.http:
            config = uvicorn.Config(build_app(self.store, self.catalog,
                                              limiter=self.limiter), host=self.host,
                                    port=self.port, log_level="warning", access_log=False,
                                    server_header=False,
                                    lifespan="off", timeout_graceful_shutdown=5)
            server = _Server(config)
            logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
            tasks.append(asyncio.create_task(_serve(server), name="trigger-http"))
            while not server.started and not tasks[-1].done():
                await asyncio.sleep(0.01)
            if server.started and server.servers:
                socks = server.servers[0].sockets
                self.bound_port = socks[0].getsockname()[1] if socks else self.port
            elif tasks[-1].done():
                why = (f"the webhook server could not start on {self.host}:{self.port}"
                       " (port in use?)")
                tasks.pop().cancel()
                server = None
                if self.http_required:
                    stop.set()
                    for t in tasks:
                        await t
                    raise OSError(why)
                self.errors.append(why)
                self.http = False
        if ready is not None:
            ready.set()
        await stop.wait()
        if server is not None:
            server.should_exit = True
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if background is not None:
            self.worker = background.worker
            self.errors = [*self.errors, *background.errors]
