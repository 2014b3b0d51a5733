"""The console driven from the keyboard (Pilot), checked against the store."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

from textual.widgets import HelpPanel, Input
from tui_helpers import SIZE, until

from clawtower.core import Approvals, Tasks, TaskSpec, open_store
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.modals import CommandLineScreen, ConfirmScreen, ReasonScreen
from clawtower.tui.rowlist import RowList
from clawtower.tui.screens.approvals import ApprovalsScreen
from clawtower.tui.screens.task_detail import TaskDetailScreen
from clawtower.tui.screens.tasks import TasksScreen


def make_app(db: str, **kw: Any) -> ClawtowerApp:
    kw.setdefault("run_engine", False)
    kw.setdefault("operator", "alice")
    return ClawtowerApp(db, **kw)


async def approvals_in(db: str) -> list[dict[str, Any]]:
    store = await open_store(db)
    try:
        return await Approvals(store).all()
    finally:
        await store.close()


async def test_approve_from_keyboard(release_db: str) -> None:
    app = make_app(release_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("2")
        await pilot.pause()
        assert isinstance(app.screen, ApprovalsScreen)
        assert len(app.model.approvals) == 1
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert app.focused is not None and app.focused.id == "no"  # destructive: No first
        await pilot.press("y")
        await until(pilot, lambda: not app.model.approvals)
    store = await open_store(release_db)
    try:
        assert await Approvals(store).pending() == []
        [decided] = await Approvals(store).all()
        assert decided["status"] == "approved"
        assert decided["decided_by"] == "alice"
    finally:
        await store.close()


async def test_enter_on_the_default_no_decides_nothing(release_db: str) -> None:
    app = make_app(release_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("2", "a")
        await pilot.pause()
        await pilot.press("enter")  # the focused button is No
        await pilot.pause(0.3)
        assert isinstance(app.screen, ApprovalsScreen)
        assert len(app.model.approvals) == 1
    assert [a["status"] for a in await approvals_in(release_db)] == ["pending"]


async def test_reject_asks_a_reason(release_db: str) -> None:
    app = make_app(release_db, operator="bob")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("2", "r")
        await pilot.pause()
        assert isinstance(app.screen, ReasonScreen)
        await pilot.press("enter")  # empty: refused, the prompt stays
        await pilot.pause()
        assert isinstance(app.screen, ReasonScreen)
        await pilot.press(*"spam", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: not app.model.approvals)
    [decided] = await approvals_in(release_db)
    assert (decided["status"], decided["decided_by"], decided["reason"]) == (
        "rejected", "bob", "spam")


async def test_reject_cancelled_with_escape(release_db: str) -> None:
    app = make_app(release_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("2", "r")
        await pilot.pause()
        await pilot.press(*"hmm", "escape")
        await pilot.pause()
        assert isinstance(app.screen, ApprovalsScreen)
    assert [a["status"] for a in await approvals_in(release_db)] == ["pending"]


async def test_core_errors_are_shown_not_raised(release_db: str) -> None:
    app = make_app(release_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        approval_id = app.model.approvals[0]["id"]
        # decided elsewhere meanwhile: the console's second decision is a Conflict
        store = await open_store(release_db)
        await Approvals(store).approve(approval_id, by="carol")
        await store.close()
        app.decide(approval_id, approve=False, reason="late")
        await until(pilot, lambda: any("already decided: approved by carol at " in n.message
                                       and n.title == "Already decided"
                                       for n in app._notifications))
        await pilot.press("colon", *"approve nosuchid", "enter")
        await until(pilot, lambda: any("no such approval" in n.message
                                       for n in app._notifications))
        assert app.is_running


async def test_write_from_another_process_shows_up(demo_db: str) -> None:
    app = make_app(demo_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        tasks = app.screen.query_one("#tasks", RowList)
        assert "T-10" not in tasks
        code = (
            "import asyncio, sys\n"
            "from clawtower import core\n"
            "async def main():\n"
            "    store = await core.open_store(sys.argv[1])\n"
            "    spec = core.TaskSpec(title='Written by another process', goal='prove it')\n"
            "    print(await core.Tasks(store).create(spec))\n"
            "    await store.close()\n"
            "asyncio.run(main())\n")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, demo_db, stdout=subprocess.PIPE,
            cwd=str(Path(__file__).resolve().parents[2]))
        out, _ = await proc.communicate()
        assert out.decode().strip() == "T-10"
        took = await until(pilot, lambda: "T-10" in tasks, timeout=2.0)
        assert took < 1.5
        assert tasks.get("T-10")["title"] == "Written by another process"
        log = app.screen.query_one("#events", RowList)
        events = [log.get(key) for _, key in log.lines]
        assert any(e.entity_id == "T-10" and e.type == "task.created" for e in events)


async def test_filter_narrows_and_escape_clears(demo_db: str) -> None:
    app = make_app(demo_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        tasks = app.screen.query_one("#tasks", RowList)
        total = tasks.visible_count
        await pilot.press("slash", *"invoice")
        await pilot.pause()
        assert tasks.visible_count == 2
        assert "2 of 9" in str(tasks.border_subtitle)
        await pilot.press("enter")  # keep the filter, back to the list
        await pilot.pause()
        assert app.focused is tasks and tasks.filter_text == "invoice"
        await pilot.press("escape")
        await pilot.pause()
        assert tasks.visible_count == total and tasks.filter_text == ""


async def test_drill_down_shows_history_and_goes_back(demo_db: str) -> None:
    app = make_app(demo_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        tasks = app.screen.query_one("#tasks", RowList)
        assert tasks.move_cursor_to_key("T-3")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, TaskDetailScreen)
                    and app.screen.detail is not None)
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, TaskDetailScreen) and screen.task_id == "T-3"
        history = str(screen.query_one("#sec-history").border_title)
        assert history == "History · 8 transitions"
        circuit = screen.query_one("#sec-circuit")
        assert circuit.display
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, TasksScreen)


async def test_detail_updates_live_and_approves(release_db: str) -> None:
    app = make_app(release_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("colon", *"task 1", "enter")
        await until(pilot, lambda: isinstance(app.screen, TaskDetailScreen)
                    and app.screen.detail is not None)
        screen = app.screen
        assert isinstance(screen, TaskDetailScreen)
        assert screen.query_one("#sec-pending").display
        await pilot.press("a")
        await pilot.pause()
        await pilot.press("y")
        await until(pilot, lambda: not screen.query_one("#sec-pending").display)
        assert screen.detail is not None
        assert screen.detail["approvals"][0]["status"] == "approved"


async def test_command_line_theme_and_unknown_command(demo_db: str) -> None:
    app = make_app(demo_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        assert app.theme == "clawtower-dark"
        await pilot.press("colon")
        await pilot.pause()
        assert isinstance(app.screen, CommandLineScreen)
        await pilot.press(*"theme ")
        app.screen.query_one(Input).value = "theme clawtower-light"  # spare 15 key presses
        await pilot.press("enter")
        await until(pilot, lambda: app.theme == "clawtower-light")
        await pilot.press("colon", *"frob", "enter")
        await until(pilot, lambda: any("unknown command" in n.message
                                       for n in app._notifications))
        await pilot.press("colon", *"t 99", "enter")
        await until(pilot, lambda: any("no such task" in n.message for n in app._notifications))


async def test_modes_help_and_quit(demo_db: str) -> None:
    app = make_app(demo_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("3")
        await pilot.pause()
        assert app.current_mode == "meetings"
        await pilot.press("4")
        await pilot.pause()
        assert app.current_mode == "sessions"
        await pilot.press("1", "question_mark")
        await pilot.pause()
        assert app.screen.query(HelpPanel)
        await pilot.press("question_mark")
        await pilot.pause()
        assert not app.screen.query(HelpPanel)
        # esc closes the key panel too (issue 27, item 6), and only the panel
        await pilot.press("question_mark")
        await pilot.pause()
        assert app.screen.query(HelpPanel)
        await pilot.press("escape")
        await pilot.pause()
        assert not app.screen.query(HelpPanel) and app.current_mode == "tasks"
        # the panel belongs to its mode: leaving closes it, coming back finds the list whole
        await pilot.press("question_mark")
        await pilot.pause()
        assert app.screen.query(HelpPanel)
        await pilot.press("2", "1")
        await pilot.pause()
        assert app.current_mode == "tasks" and not app.screen.query(HelpPanel)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


async def test_palette_offers_approvals(release_db: str) -> None:
    app = make_app(release_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"approve")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))


async def test_in_process_engine_drives_new_tasks(tmp_path: Path) -> None:
    script = tmp_path / "agents.yaml"
    script.write_text("seed: 1\nspeed: 0\n")
    db = str(tmp_path / "store.db")
    app = make_app(db, run_engine=True, agents_file=str(script))
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        assert app.store is not None
        spec = TaskSpec(title="Drive me", goal="Check the engine runs in the console",
                        outputs=["out.txt"],
                        acceptance_criteria=["The file out.txt exists after the run"])
        tid = await Tasks(app.store).create(spec)
        await until(pilot, lambda: app.model.tasks.get(tid, {}).get("phase") == "completed",
                    timeout=10)
        await until(pilot, lambda: app.engine_status() == "driving", timeout=5)
        tasks = app.screen.query_one("#tasks", RowList)
        assert tasks.get(tid)["phase"] == "completed"
    # the engine let go of its leases (its presence, the task it drove) on the way out
    store = await open_store(db)
    try:
        rows = await store.fetchall("SELECT name, released FROM leases ORDER BY name")
        # (and the flow engine's `flows` lease: a console runs flows too)
        assert [r["name"].split(":")[0] for r in rows] == ["engine", "flows", "task"], rows
        assert all(r["released"] for r in rows), rows
    finally:
        await store.close()


async def test_palette_finds_tasks(demo_db: str) -> None:
    app = make_app(demo_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("ctrl+p", *"schema")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, TaskDetailScreen))
        assert isinstance(app.screen, TaskDetailScreen) and app.screen.task_id == "T-3"


async def test_unusable_store_is_reported_not_raised(tmp_path: Path) -> None:
    app = make_app(str(tmp_path))  # a directory, not a store file
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
    assert app.return_code == 2
