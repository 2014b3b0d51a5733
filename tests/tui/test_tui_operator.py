"""The operator acts on everything that waits, from the keyboard: unblock, retry and cancel
tasks (the orchestrator executes them); every key is listed in context, a key that cannot act
says why, and the `:` line completes commands and ids."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import HelpPanel, Input, KeyPanel, Markdown
from tui_helpers import SIZE, shown, until

from clawtower.core import Tasks, open_store
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.modals import ChoiceScreen, CommandLineScreen, ConfirmScreen, ReasonScreen
from clawtower.tui.screens.meetings import MeetingsScreen
from clawtower.tui.screens.task_detail import TaskDetailScreen
from clawtower.tui.screens.tasks import TasksScreen
from clawtower.tui.screens.workflows import WorkflowsScreen
from clawtower.tui.seed import seed_meetings, seed_workflows
from clawtower.tui.views import TaskList


def make_app(db: str) -> tuple[ClawtowerApp, list[str]]:
    """The app, and the notifications it shows (messages), recorded in order."""
    app = ClawtowerApp(db, run_engine=False, operator="alice")
    said: list[str] = []
    notify = app.notify

    def record(message: str, *args: Any, **kw: Any) -> None:
        said.append(str(message))
        notify(message, *args, **kw)

    app.notify = record  # type: ignore[method-assign]
    return app, said


async def events_of(db: str, entity: str) -> list[tuple[str, str, str]]:
    store = await open_store(db)
    try:
        return [(e.type, e.actor, e.role) for e in await store.events_after(0, 10_000,
                                                                               entity_id=entity)]
    finally:
        await store.close()


async def task_in(db: str, tid: str) -> dict[str, Any]:
    store = await open_store(db)
    try:
        return await Tasks(store).get(tid)
    finally:
        await store.close()


def blocked_task(app: ClawtowerApp) -> str:
    [tid] = [t for t, row in app.model.tasks.items() if row["phase"] == "circuit_open"]
    return tid


async def open_blocked_task(app: ClawtowerApp, pilot: Pilot[Any]) -> str:
    """Open the detail screen of the demo's circuit-open task; returns its id."""
    tid = blocked_task(app)
    app.open_task(tid)
    await until(pilot, lambda: isinstance(app.screen, TaskDetailScreen))
    return tid


async def workflows_mode(app: ClawtowerApp, pilot: Pilot[Any]) -> WorkflowsScreen:
    """Switch to mode 5 and return its screen."""
    await pilot.press("5")
    await until(pilot, lambda: isinstance(app.screen, WorkflowsScreen))
    screen = app.screen
    assert isinstance(screen, WorkflowsScreen)
    return screen


def gated_run(app: ClawtowerApp) -> dict[str, Any]:
    """The seeded workflow run paused at an approval gate (not an input request)."""
    return next(r for r in app.model.workflows if r["status"] == "paused"
                and r.get("gate_kind") != "input")


async def test_unblock_from_the_task_detail_with_a_choice(demo_db: str) -> None:
    app, _ = make_app(demo_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        tid = await open_blocked_task(app, pilot)
        await pilot.press("u")
        await until(pilot, lambda: isinstance(app.screen, ChoiceScreen))
        await pilot.press("1")  # retry: a fresh attempt budget
        await until(pilot, lambda: app.model.tasks[tid]["phase"] == "execution_ready")
    got = await events_of(demo_db, tid)
    assert got[-2:] == [("task.commanded", "alice", "operator"),
                        ("task.transitioned", "orchestrator", "orchestrator")]
    t = await task_in(demo_db, tid)
    assert t["phase_reason"] == "unblock by alice: from the console"


async def test_abandon_asks_first_and_cancel_from_the_list(demo_db: str) -> None:
    app, _ = make_app(demo_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        tid = await open_blocked_task(app, pilot)
        await pilot.press("u", "3")  # abandon: destructive, so a y/n with No focused
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert app.focused is not None and app.focused.id == "no"
        await pilot.press("n")
        await pilot.pause()
        assert app.model.tasks[tid]["phase"] == "circuit_open"
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, TasksScreen))
        draft = next(t for t, r in app.model.tasks.items() if r["phase"] == "spec_draft")
        lst = app.screen.query_one(TaskList)
        lst.focus()
        assert lst.move_cursor_to_key(draft)
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: app.model.tasks[draft]["phase"] == "failed")
    assert (await events_of(demo_db, draft))[-2][:2] == ("task.commanded", "alice")


async def test_keys_that_cannot_act_say_why(demo_db: str, tmp_path: Path) -> None:
    app, said = make_app(demo_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        done = next(t for t, r in app.model.tasks.items() if r["phase"] == "completed")
        lst = app.screen.query_one(TaskList)
        lst.focus()
        assert lst.move_cursor_to_key(done)
        await pilot.press("u", "x")
        await pilot.pause()
        assert isinstance(app.screen, TasksScreen)  # no dialog opened
        assert said[-2:] == [
            f"{done} is completed: nothing to unblock (only a task whose circuit is open is"
            " blocked)", f"{done} already ended completed: nothing to cancel"]
        app.open_task(done)
        await until(pilot, lambda: isinstance(app.screen, TaskDetailScreen))
        await pilot.press("a", "slash")
        await pilot.pause()
        assert said[-2:] == [f"{done}: nothing waits for approval",
                             "nothing to filter in a task's detail (esc goes back to the list)"]
        # the footer keeps the keys, dimmed, so they stay discoverable
        active = app.screen.active_bindings
        assert active["u"].binding.description == "Unblock" and not active["u"].enabled
        assert active["a"].binding.description == "Approve" and not active["a"].enabled


async def test_meeting_keys_on_a_finished_meeting_say_why(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    await seed_meetings(db)
    app, said = make_app(str(db))
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("3")
        await until(pilot, lambda: isinstance(app.screen, MeetingsScreen)
                    and app.screen.detail is not None)
        screen = app.screen
        assert isinstance(screen, MeetingsScreen)
        ended = next(m["id"] for m in app.model.meetings if m["status"] != "running")
        screen.item_list.move_cursor_to_key(ended)
        await pilot.press("s", "plus")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        assert said[-2].startswith(f"{ended} has ended (")
        assert said[-2].endswith("nothing to stop")
        assert said[-1].endswith("nothing to grant a round to")


async def test_workflow_keys_decide_the_selected_runs_gate(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    await seed_workflows(db)
    app, said = make_app(str(db))
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        screen = await workflows_mode(app, pilot)
        finished = next(r for r in app.model.workflows if r["status"] == "ok")
        screen.item_list.move_cursor_to_key(finished["id"])
        await pilot.press("a")
        await pilot.pause()
        assert said[-1] == (f"{finished['id']} is ok, not waiting at a gate: nothing to"
                            " decide")
        gated = gated_run(app)
        screen.item_list.move_cursor_to_key(gated["id"])
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert gated["approval_id"] in str(app.screen.title_text)


def _text(renderable: Any) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


async def test_the_key_panel_lists_keys_and_commands_in_context(demo_db: str) -> None:
    app, _ = make_app(demo_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("question_mark")
        await until(pilot, lambda: bool(app.screen.query(HelpPanel)))
        await pilot.pause(0.2)
        keys = _text(app.screen.query_one(KeyPanel).query_one("BindingsTable")
                     .render_bindings_table())  # type: ignore[attr-defined]
        for line in ("Unblock", "Cancel task", "Filter", "Sessions Agent sessions"):
            assert line in keys, keys
        help_md = app.screen.query_one("#widget-help", Markdown).source
        for command in (":unblock ID CHOICE [REASON]", ":retry ID", ":cancel ID"):
            assert command in help_md


async def test_the_command_line_completes_and_runs_operator_commands(demo_db: str) -> None:
    app, said = make_app(demo_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        tid = blocked_task(app)
        await pilot.press("colon")
        await until(pilot, lambda: isinstance(app.screen, CommandLineScreen))
        await pilot.press(*"unb")
        inp = app.screen.query_one(Input)
        await until(pilot, lambda: inp._suggestion == "unblock ")
        await pilot.press("right")
        assert inp.value == "unblock "
        hint = app.screen.query_one("#command-hint")
        assert "unblock ID CHOICE [REASON]" in str(hint.render())
        await pilot.press(*tid[:2])
        await until(pilot, lambda: inp._suggestion == f"unblock {tid}")
        await pilot.press("right", "space", *"rev")
        await until(pilot, lambda: inp._suggestion == f"unblock {tid} revise")
        await pilot.press("right", *" the spec was wrong", "enter")
        await until(pilot, lambda: app.model.tasks[tid]["phase"] == "spec_draft")
        await pilot.press("colon", *"transition 3 failed", "enter")
        await until(pilot, lambda: bool(said) and said[-1].startswith("unknown command"))
        assert "use :unblock ID CHOICE, :retry ID or :cancel ID" in said[-1]
    t = await task_in(demo_db, tid)
    assert t["phase_reason"] == "unblock by alice: the spec was wrong"


async def test_a_gate_rejected_from_mode_5_shows_why_and_what_never_ran(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    await seed_workflows(db)
    app, _ = make_app(str(db))
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        screen = await workflows_mode(app, pilot)
        gated = gated_run(app)
        screen.item_list.move_cursor_to_key(gated["id"])
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ReasonScreen))
        await pilot.press(*"not this week", "enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: screen.detail is not None
                    and screen.detail["status"] == "cancelled", timeout=20)
        assert screen.detail is not None
        statuses = [s["status"] for s in screen.detail["steps"]]
        assert "pending" not in statuses and statuses[-1] == "cancelled"
        assert "rejected: not this week" in shown(screen.query_one("#wf-outcome"))
        assert "never ran" in shown(screen.query_one("#wf-steps"))
