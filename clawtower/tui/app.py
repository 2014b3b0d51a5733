"""The operator console: a Textual app attached to one store, optionally driving an engine.

Data flow: one async worker waits for the store to change (`wait_for_change` wakes at once for
this process's writes and polls for other processes'), reads the delta (changed task rows,
new events, pending approvals), and hands it to every screen inside `batch_update()`, at most
once per `poll_interval`. Decisions go through the same core API as the CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import importlib
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.notifications import SeverityLevel
from textual.reactive import Initialize, Reactive
from textual.screen import ModalScreen, Screen
from textual.theme import BUILTIN_THEMES, Theme
from textual.widget import AwaitMount
from textual.worker import Worker

from clawtower.core.errors import ClawError
from clawtower.core.store import open_store
from clawtower.core.store.postgres_url import is_postgres_url
from clawtower.core.textsafe import safe, safe_line

from . import workflowdata
from .commands import CommandSuggester, ConsoleCommands, parse_command_line
from .commands import describe as describe_command
from .decisions import DecisionActions
from .meetingops import MeetingActions
from .modals import CommandLineScreen, ConfirmScreen
from .model import ConsoleModel, Delta, StoreFollower
from .protocol import ConsoleApp, View
from .render import install_terminal_guard
from .rowlist import RowList
from .screens.base import ConsoleScreen
from .screens.tasks import TasksScreen
from .taskops import TaskActions
from .themes import ThemeLoad, load_themes, theme_folders, variable_defaults
from .views import ModeBar
from .workers import EngineWorkers

if TYPE_CHECKING:
    from clawtower.core import AgentSet, Engine, Store
    from clawtower.core.store.faults import Fault
    from clawtower.core.workers import ComposedEngine


DEFAULT_THEME = "clawtower-dark"
ACTIVE_PHASES = ("executing", "retrying", "spec_gate", "quality_gate", "ready_to_resume",
                 "execution_ready", "spec_review")


def _mode(module: str, name: str) -> Callable[[], Screen[Any]]:
    """A mode's screen, its module imported when the mode is first opened: the console paints
    its first mode without loading the other seven (start-up: BENCHMARKS.md)."""
    def make() -> Screen[Any]:
        screen: Screen[Any] = getattr(
            importlib.import_module(f"clawtower.tui.screens.{module}"), name)()
        return screen

    return make


def first_theme(load: ThemeLoad) -> str:
    """$CLAWTOWER_THEME (or $TEXTUAL_THEME) when it names a theme, else clawtower-dark."""
    names = {t.name for t in load.themes} | set(BUILTIN_THEMES)
    wanted = os.environ.get("CLAWTOWER_THEME") or os.environ.get("TEXTUAL_THEME")
    if wanted and wanted in names:
        return wanted
    return DEFAULT_THEME if DEFAULT_THEME in names else "textual-dark"


def _first_theme_of(app: Any) -> str:
    return str(app.first_theme)


def default_operator() -> str:
    name = os.environ.get("USER") or os.environ.get("USERNAME")
    if not name:
        with contextlib.suppress(Exception):
            name = getpass.getuser()
    return name or "operator"


class ClawtowerApp(DecisionActions, TaskActions, MeetingActions, EngineWorkers):
    """The clawtower console."""

    CSS_PATH = "app.tcss"
    TITLE = "clawtower"
    COMMANDS = App.COMMANDS | {ConsoleCommands}
    MODES: ClassVar[dict[str, Any]] = {
        "tasks": TasksScreen,
        "approvals": _mode("approvals", "ApprovalsScreen"),
        "meetings": _mode("meetings", "MeetingsScreen"),
        "sessions": _mode("sessions", "SessionsScreen"),
        "workflows": _mode("workflows", "WorkflowsScreen"),
        "experts": _mode("experts", "ExpertsScreen"),
        "flows": _mode("flows", "FlowsScreen"),
        "triggers": _mode("triggers", "TriggersScreen"),
    }
    DEFAULT_MODE = "tasks"
    # The first theme is the one Textual starts with (App.__init__ reads it for the colours
    # of the first paint), not one set afterwards: setting it re-parses the whole stylesheet
    # twice before the first paint (start-up: BENCHMARKS.md).
    theme: Reactive[str] = Reactive(Initialize(_first_theme_of))

    BINDINGS: ClassVar[list[BindingType]] = [
        # the mode keys are on the mode bar (every one, at any width): the footer keeps its
        # room for the current mode's keys, help and quit
        Binding("1", "switch_mode('tasks')", "Tasks", show=False, id="mode.tasks",
                tooltip="Tasks by phase"),
        Binding("2", "switch_mode('approvals')", "Approvals", show=False, id="mode.approvals",
                tooltip="Pending approvals"),
        Binding("3", "switch_mode('meetings')", "Meetings", show=False, id="mode.meetings",
                tooltip="Consensus meetings, live"),
        Binding("4", "switch_mode('sessions')", "Sessions", show=False, id="mode.sessions",
                tooltip="Agent sessions (arrive with a later issue)"),
        Binding("5", "switch_mode('workflows')", "Workflows", show=False, id="mode.workflows",
                tooltip="Workflow runs and their steps, live"),
        Binding("6", "switch_mode('experts')", "Experts", show=False, id="mode.experts",
                tooltip="Installed experts, their runs and pending confirms"),
        Binding("7", "switch_mode('flows')", "Flows", show=False, id="mode.flows",
                tooltip="Task DAGs delegated between agents, live"),
        Binding("8", "switch_mode('triggers')", "Triggers", show=False, id="mode.triggers",
                tooltip="Expert triggers, their queues and the dead-letter queue"),
        Binding("question_mark,f1", "toggle_help", "Keys", id="help",
                tooltip="Show or hide the key panel"),
        Binding("colon", "command_line", "Command", id="command-line",
                tooltip="Type a command (→ completes commands and ids; the hint line and ?"
                        " list them)"),
        Binding("q", "quit_console", "Quit", id="quit", tooltip="Quit the console"),
    ]

    def __init__(self, db_path: str, *, run_engine: bool = True,
                 agents_file: str | None = None, operator: str | None = None,
                 poll_interval: float = 0.25,
                 on_loaded: Callable[[ConsoleApp], None] | None = None,
                 prepare: Callable[[], Awaitable[list[str]]] | None = None) -> None:
        # Script errors surface here, before the screen is taken over.
        # The agents file (a clawtower.yaml or a simulator script: one loader, the CLI's
        # --config); its errors surface here, before the screen is taken over.
        self._agents: AgentSet | None = None  # the built-in simulator's, made on first use
        if agents_file:
            from clawtower.core.agents.config import load_agents

            self._agents = load_agents(agents_file)
        self.agents_file = agents_file  # the flow engine's agents (the demo's scripts)
        install_terminal_guard()  # untrusted text never drives the terminal
        self.theme_load: ThemeLoad = load_themes(*theme_folders())
        self.first_theme = first_theme(self.theme_load)
        super().__init__()
        self.db_path = str(db_path)
        self.run_engine = run_engine
        self.operator = operator or default_operator()
        self.poll_interval = poll_interval
        self.on_loaded = on_loaded  # e.g. the demo's live acts (cli/demo.py)
        # e.g. the demo's seeding: run behind the painted frame, before the store loads;
        # what it returns is shown as notifications
        self.prepare = prepare
        self.model = ConsoleModel()
        self.store: Store | None = None
        self.engine: Engine | None = None
        # the engine `serve` runs, every worker but the webhook server (tui/workers.py)
        self.workers_engine: ComposedEngine | None = None
        self._engine_task: asyncio.Task[None] | None = None
        # text of the turns this console's worker is running, as it streams (mode 4)
        self.session_streams: dict[str, dict[str, str]] = {}
        self._follower: StoreFollower | None = None
        self._views: list[View] = []
        self.loaded = asyncio.Event()
        self.pending_meeting: str | None = None  # mode 3 selects it once it is listed
        self.pending_rerun: str | None = None  # mode 5 selects the new run once it starts
        self._meeting_tasks: set[asyncio.Task[Any]] = set()
        self.deltas = 0
        for theme in self.theme_load.themes:  # the first theme is already in use (`theme`)
            self.register_theme(theme)

    @property
    def agents(self) -> AgentSet:
        """The agents file's agents, else the built-in simulator's (made when first needed:
        the console paints before the simulator loads)."""
        if self._agents is None:
            from clawtower.core.agents.registry import AgentSet

            self._agents = AgentSet.simulated()
        return self._agents

    @agents.setter
    def agents(self, value: AgentSet) -> None:
        self._agents = value

    # ------------------------------------------------------------------ themes

    def get_theme(self, theme_name: str) -> Theme | None:
        """Textual's themes and the registered ones; while App.__init__ runs (before ours
        are registered), also the loaded ones: it reads the first theme from here."""
        theme = super().get_theme(theme_name)
        if theme is None:
            theme = next((t for t in self.theme_load.themes if t.name == theme_name), None)
        return theme

    def get_theme_variable_defaults(self) -> dict[str, str]:
        theme = None
        with contextlib.suppress(Exception):
            theme = self.current_theme
        return variable_defaults(theme)

    # ------------------------------------------------------------------ lifecycle

    async def on_mount(self) -> None:
        for problem in self.theme_load.problems:
            self.log.warning(problem)
            self.notify(problem, title="Theme skipped", severity="warning", timeout=10)
        # Textual paints nothing until on_mount returns (it runs inside the first batch
        # update): the frame and the first mode paint now, empty and "loading", and the store
        # opens and loads behind them (start-up: BENCHMARKS.md).
        self.call_after_refresh(lambda: self.run_worker(self._load_store(), group="load",
                                                        exit_on_error=False))

    async def _load_store(self) -> None:
        """Open and load the store, then start the engine and follow the store."""
        try:
            if self.prepare is not None:
                for note in await self.prepare():
                    self.notify(note, severity="warning", timeout=10)
            self.store = await open_store(self.db_path)
            self.store.fault_listeners.append(self._store_fault)
            self._follower = StoreFollower(self.store, self.model)
            delta = await self._follower.load()
        except ClawError as exc:
            self.exit(return_code=exc.exit_code, message=str(exc))
            return
        except Exception as exc:  # a bug: said and exit 1, never a console left "loading"
            self.exit(return_code=1, message=f"cannot load the store: {type(exc).__name__}:"
                                             f" {exc}")
            return
        self.loaded.set()  # first: the views it updates no longer say "loading"
        self._deliver(delta)
        if self.on_loaded is not None:
            self.on_loaded(self)
        if self.run_engine:  # once the loaded rows have painted
            self.call_after_refresh(lambda: self.run_worker(
                self._start_engine(), group="engine", exit_on_error=False))
        self.run_worker(self._follow(), group="follow", exclusive=True, exit_on_error=False)

    async def _follow(self) -> None:
        assert self.store is not None and self._follower is not None
        store, follower = self.store, self._follower
        failures = 0
        while True:
            try:
                newest = await store.wait_for_change(self.model.seq, timeout=2.0)
                delta = await follower.poll(newest)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                if failures == 1:
                    self.notify(f"reading the store: {exc}", severity="error", timeout=10)
                await asyncio.sleep(1.0)
                continue
            failures = 0
            self._deliver(delta)
            if not delta.empty:
                await asyncio.sleep(self.poll_interval)  # coalesce bursts: at most ~4 Hz

    def _deliver(self, delta: Delta) -> None:
        self.deltas += 1
        with self.batch_update():
            for view in list(self._views):
                view.model_changed(delta)

    async def on_unmount(self) -> None:
        for task in list(self._meeting_tasks):
            task.cancel()
        await self._stop_workers()
        if self.store is not None:
            with contextlib.suppress(Exception):
                await self.store.close()

    def add_view(self, view: View) -> None:
        if view not in self._views:
            self._views.append(view)

    def remove_view(self, view: View) -> None:
        with contextlib.suppress(ValueError):
            self._views.remove(view)

    async def wait_loaded(self, timeout: float = 30.0) -> None:
        await asyncio.wait_for(self.loaded.wait(), timeout)

    def store_fault(self) -> str | None:
        """The storage fault the store's writes wait on now, said for the mode bar."""
        fault = self.store.fault if self.store is not None else None
        return None if fault is None else f"store {fault.describe()}"

    def _store_fault(self, fault: Fault | None) -> None:
        """A storage fault began or ended: the bar says it (reads go on; writes wait)."""
        if fault is not None:
            self.notify(f"store: {fault.cause}; writes wait and go on once it takes them"
                        " (nothing is lost)", title="Store", severity="error", timeout=15)
        else:
            self.notify("store: writable again", title="Store", timeout=5)
        with contextlib.suppress(Exception):
            for bar in self.screen.query(ModeBar):
                bar.update_bar()

    def engine_status(self) -> str:
        if not self.loaded.is_set():
            return "loading"
        if self.engine is not None:
            return "driving" if self.engine.holding else "standby"
        lease = self.model.lease
        if lease and not lease["released"] and lease["expires_at"] > time.time():
            return "elsewhere"
        return "none"

    # ------------------------------------------------------------------ keys and commands

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # No mode switch or command line under a modal dialog: the dialog is waiting.
        blocked = action in ("switch_mode", "command_line", "quit_console")
        return not (blocked and isinstance(self.screen, ModalScreen))

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Tasks", "Mode 1: tasks by phase", partial(self.switch_mode, "tasks"))
        yield SystemCommand("Approvals", "Mode 2: pending approvals",
                            partial(self.switch_mode, "approvals"))
        yield SystemCommand("Meetings", "Mode 3: consensus meetings",
                            partial(self.switch_mode, "meetings"))
        yield SystemCommand("Experts", "Mode 6: installed experts, their runs and confirms",
                            partial(self.switch_mode, "experts"))
        yield SystemCommand("Flows", "Mode 7: task DAGs, mailboxes, node transcripts",
                            partial(self.switch_mode, "flows"))
        yield SystemCommand("Triggers", "Mode 8: triggers, queues and the dead-letter queue",
                            partial(self.switch_mode, "triggers"))

    def switch_mode(self, mode: str) -> AwaitMount:
        """The key panel belongs to the mode it was opened in: leaving closes it (left open
        it would squeeze the mode's list and its top bar when the operator comes back). By
        name: the help widget (it loads Markdown) is imported when first shown."""
        self.screen.query("HelpPanel").remove()
        return super().switch_mode(mode)

    def action_toggle_help(self) -> None:
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()
        else:
            self.action_show_help_panel()

    def action_command_line(self, value: str = "") -> None:
        self.push_screen(CommandLineScreen(value, suggester=CommandSuggester(self),
                                           describe=describe_command), self.run_command_line)

    def run_command_line(self, line: str | None) -> None:
        if not line:
            return
        result = parse_command_line(self, line)
        if isinstance(result, str):
            self.notify(result, title="Command", severity="error")
            return
        self.call_later(result)

    def filter_focused(self, text: str) -> None:
        screen = self.screen
        focused = screen.focused
        if isinstance(focused, RowList) and isinstance(screen, ConsoleScreen):
            focused.set_filter(text)
            screen.filter_applied(focused)
        else:
            self.notify("filter: no list has focus", severity="warning")

    def notify(self, message: str, *, title: str = "",
               severity: SeverityLevel = "information", timeout: float | None = None,
               markup: bool = True) -> None:
        """Every toast, from any screen: its text often quotes untrusted text (an error, a
        reply, a title), so it is shown (core/textsafe.py) and never read as markup (a
        `[@click=...]` in a title must not become an action)."""
        super().notify(safe(message), title=safe_line(title), severity=severity,
                       timeout=timeout, markup=False)

    def _in_flight(self) -> list[Worker[Any]]:
        """Workflow runs and meetings this console is running itself."""
        return [w for w in self.workers
                if w.group in ("workflow-runs", "meetings") and w.is_running]

    def action_quit_console(self) -> None:
        busy = sum(self.model.counts.get(p, 0) for p in ACTIVE_PHASES)
        driving = self.engine is not None and self.engine.holding and busy
        mine = self._in_flight()
        if not driving and not mine:
            self.exit(return_code=0)
            return
        lines = []
        if driving:
            lines.append(f"This console's engine is driving {busy} task(s). They resume when"
                         " an engine next runs on this store.")
        runs = sum(1 for w in mine if w.group == "workflow-runs")
        meetings = len(mine) - runs
        if runs:
            lines.append(f"{runs} workflow run(s) are running in this console: each stops at"
                         " its next step (within 5 s; a step still running then is left"
                         " interrupted) and any engine on this store drives it on.")
        if meetings:
            lines.append(f"{meetings} meeting(s) are running in this console and stop with it.")
        def done(ok: bool | None) -> None:
            if ok:
                self.run_worker(self._stop_and_exit(), group="quit")

        self.push_screen(ConfirmScreen("Quit the console?", "\n\n".join(lines), yes="Quit",
                                       destructive=True), done)

    async def _stop_and_exit(self) -> None:
        """Hand this console's runs over (they stop at their next step boundary, for any
        engine to drive on), stop its meetings (recorded as stopped), then exit."""
        from clawtower.core.engine import HANDOVER_S

        mine = self._in_flight()
        workflowdata.hand_over_all()
        runs = [w for w in mine if w.group == "workflow-runs"]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(HANDOVER_S):
                for w in runs:
                    with contextlib.suppress(Exception):
                        await w.wait()
        for w in mine:
            w.cancel()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                for w in mine:
                    with contextlib.suppress(Exception):
                        await w.wait()
        self.exit(return_code=0)


def run_console(db_path: str, *, run_engine: bool = True, agents_file: str | None = None,
                operator: str | None = None,
                on_loaded: Callable[[ConsoleApp], None] | None = None,
                prepare: Callable[[], Awaitable[list[str]]] | None = None) -> int:
    """Open the console on `db_path`; returns the process exit code. `prepare` runs behind
    the first paint, before the store loads (the demo seeds there); `on_loaded` runs once
    the store is loaded (the demo starts its live meeting and workflow there)."""
    target = db_path if is_postgres_url(db_path) else str(Path(db_path).expanduser())
    app = ClawtowerApp(target, run_engine=run_engine, agents_file=agents_file,
                       operator=operator, on_loaded=on_loaded, prepare=prepare)
    app.run()
    return int(app.return_code or 0)


def _satisfies(app: ClawtowerApp) -> ConsoleApp:
    """Type-checked only: the app is what its screens expect (tui/protocol.py)."""
    return app
