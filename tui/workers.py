"""The console's background workers: the engine (tasks), the session worker and the flow
engine, started once the store has loaded and stopped when the console closes. A mixin of
the app (like tui/decisions.py), so tui/app.py keeps to the console itself.

Each worker failing leaves the console up (the store keeps the truth) and says so once.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib

from textual.app import App

from core import Engine, JournalSink, Store
from core.agents.registry import AgentSet
from core.config import effects_journal


class EngineWorkers(App[int]):
    """The app sets `store`, `agents`, `agents_file`, `db_path`, `session_streams` and the
    task handles before `_start_engine` runs."""

    store: Store | None
    agents: AgentSet
    agents_file: str | None
    db_path: str
    engine: Engine | None
    session_streams: dict[str, dict[str, str]]
    _engine_task: asyncio.Task[None] | None
    _sessions_task: asyncio.Task[None] | None
    _flows_task: asyncio.Task[None] | None
    _sessions_stop: asyncio.Event

    async def _start_engine(self) -> None:
        assert self.store is not None
        # the session worker's and the flow engine's modules (ACP and MCP clients: ~1 s on a
        # busy machine) import in a thread: in the loop they would freeze the console that
        # has just painted
        for module in ("core.sessions.runner", "core.flows.engine"):
            await asyncio.to_thread(importlib.import_module, module)
        self.engine = Engine(self.store, self.agents,
                             effects=JournalSink(effects_journal(self.db_path)))
        self._engine_task = asyncio.create_task(self._run_engine(), name="console-engine")
        self._sessions_task = asyncio.create_task(self._run_sessions(), name="console-sessions")
        self._flows_task = asyncio.create_task(self._run_flows(), name="console-flows")

    async def _run_engine(self) -> None:
        assert self.engine is not None
        try:
            await self.engine.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the console stays up; the store keeps the truth
            self.log.error(f"engine stopped: {exc!r}")
            self.notify(f"engine stopped: {exc}", title="Engine", severity="error", timeout=30)
            self.engine = None

    async def _run_sessions(self) -> None:
        """The session worker (core/sessions): runs queued turn jobs beside the engine;
        per-session leases keep it apart from other consoles and `session run`."""
        assert self.store is not None
        from core.agents.config import load_config
        from core.sessions.runner import SessionRunner

        try:
            runner = SessionRunner(self.store, load_config(), on_text=self._session_text)
            self._session_runner = runner  # the flow engine's nodes run on it too
            await runner.run(self._sessions_stop)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the console stays up; the store keeps the truth
            self.log.error(f"session worker stopped: {exc!r}")
            self.notify(f"session worker stopped: {exc}", title="Sessions",
                        severity="error", timeout=30)

    async def _run_flows(self) -> None:
        """The flow engine (core/flows): drives running flows while it holds the `flows`
        lease (another console or `flow work` may hold it instead)."""
        assert self.store is not None
        from core.agents.config import load_config
        from core.flows.engine import model_engine

        try:
            await asyncio.sleep(0)  # the session worker first: the flow's nodes run on it
            # (unless the console runs flows on another agents file: then the engine runs
            # its own worker for its nodes' sessions, on that file's config)
            shared = getattr(self, "_session_runner", None) if self.agents_file is None \
                else None
            await model_engine(self.store, load_config(self.agents_file),
                               runner=shared).run(self._sessions_stop)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the console stays up; the store keeps the truth
            self.log.error(f"flow engine stopped: {exc!r}")
            self.notify(f"flow engine stopped: {exc}", title="Flows", severity="error",
                        timeout=30)

    def _session_text(self, session: str, turn: str, text: str) -> None:
        entry = self.session_streams.get(session)
        if entry is None or entry["turn"] != turn:
            entry = self.session_streams[session] = {"turn": turn, "text": ""}
        entry["text"] += text

    async def _stop_workers(self) -> None:
        """Stop the engine, the session worker and the flow engine; wait up to 10 s each."""
        if self.engine is not None:
            self.engine.stop()
        self._sessions_stop.set()
        for task in (self._engine_task, self._sessions_task, self._flows_task):
            if task is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(task, 10)


__all__ = ["EngineWorkers"]
