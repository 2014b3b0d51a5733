"""The console's engine: the same one `serve` runs (core/workers.py, `build_engine`: tasks,
workflow-run and meeting adoption, session turn jobs, flows, and the trigger worker with
cron and channels; not the webhook server, which is `serve`'s), started once the store has
loaded and stopped when the console closes. A console beside a running `serve` divides the
work with it through the workers' leases. A mixin of the app (like tui/decisions.py), so
tui/app.py keeps to the console itself.

Each worker failing leaves the console up (the store keeps the truth) and says so once.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from typing import TYPE_CHECKING

from textual.app import App

if TYPE_CHECKING:  # the engine loads once the store has (the console paints before it)
    from clawtower.core import Engine, Store
    from clawtower.core.agents.registry import AgentSet
    from clawtower.core.workers import ComposedEngine

#: what `build_engine` loads beyond the task engine (ACP and MCP clients, cron: ~1 s on a
#: busy machine), imported in a thread: in the loop it would freeze the console that has
#: just painted
_HEAVY = ("clawtower.core.sessions.runner", "clawtower.core.flows.engine",
          "clawtower.core.triggers.background")

_TITLES = {"tasks": "Engine", "sessions": "Sessions", "flows": "Flows",
           "triggers": "Triggers"}
_NAMES = {"tasks": "engine", "sessions": "session worker", "flows": "flow engine",
          "triggers": "trigger worker"}


class EngineWorkers(App[int]):
    """The app sets `store`, `agents`, `agents_file`, `db_path`, `session_streams` and
    `_engine_task` before `_start_engine` runs."""

    store: Store | None
    agents: AgentSet
    agents_file: str | None
    db_path: str
    engine: Engine | None  # the task engine (tasks, runs, meetings): the console's status
    workers_engine: ComposedEngine | None
    session_streams: dict[str, dict[str, str]]
    _engine_task: asyncio.Task[None] | None

    async def _start_engine(self) -> None:
        assert self.store is not None
        for module in _HEAVY:
            await asyncio.to_thread(importlib.import_module, module)
        from clawtower.core import JournalSink
        from clawtower.core.agents.config import load_config
        from clawtower.core.config import effects_journal
        from clawtower.core.errors import ClawError
        from clawtower.core.workers import TasksWorker, build_engine

        # the flows on the console's agents file when it has one (the demo's): their nodes
        # then run on a session worker of their own, on that file's config
        try:
            flow_config = None if self.agents_file is None else load_config(self.agents_file)
        except ClawError as exc:
            self._worker_failed("flows", exc)
            flow_config = None
        try:
            composed = build_engine(
                self.store, self.agents, effects=JournalSink(effects_journal(self.db_path)),
                flow_config=flow_config, on_text=self._session_text,
                on_error=self._worker_failed,
                warn=lambda text: self.notify(text, title="Sessions", severity="error",
                                              timeout=30))
        except Exception as exc:  # the console stays up; the store keeps the truth
            self._worker_failed("tasks", exc)
            return
        self.workers_engine = composed
        tasks = composed.get("tasks")
        self.engine = tasks.engine if isinstance(tasks, TasksWorker) else None
        self._engine_task = asyncio.create_task(composed.run(), name="console-engine")

    def _worker_failed(self, name: str, exc: BaseException) -> None:
        what = _NAMES.get(name, name)
        self.log.error(f"{what} stopped: {exc!r}")
        self.notify(f"{what} stopped: {exc}", title=_TITLES.get(name, name),
                    severity="error", timeout=30)
        if name == "tasks":
            self.engine = None

    def _session_text(self, session: str, turn: str, text: str) -> None:
        entry = self.session_streams.get(session)
        if entry is None or entry["turn"] != turn:
            entry = self.session_streams[session] = {"turn": turn, "text": ""}
        entry["text"] += text

    async def _stop_workers(self) -> None:
        """Stop every worker (each hands over in its own way) and wait up to 30 s: the
        trigger worker lets its runs in flight end for up to 20 s, then leaves them
        interrupted for the next worker."""
        if self.workers_engine is not None:
            self.workers_engine.stop()
        if self._engine_task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._engine_task, 30)


__all__ = ["EngineWorkers"]
