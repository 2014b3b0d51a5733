"""Snapshots of each mode on the seeded demo store (fixed clock, ids, size and time zone).

Update after an intended change with `pytest tests/tui --snapshot-update` and look at the
report before committing.
"""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot
from tui_helpers import SIZE

from clawtower.tui.app import ClawtowerApp
from clawtower.tui.screens.approvals import ApprovalsScreen
from clawtower.tui.views import ApprovalList


async def loaded(pilot: Pilot[Any]) -> None:
    app = pilot.app
    assert isinstance(app, ClawtowerApp)
    await app.wait_loaded()
    await pilot.pause()


def app_for(db: str, theme: str | None = None) -> ClawtowerApp:
    app = ClawtowerApp(db, run_engine=False, operator="alice")
    if theme:
        app.theme = theme
    return app


def test_tasks_mode(snap_compare: Any, demo_db: str) -> None:
    assert snap_compare(app_for(demo_db), terminal_size=SIZE, run_before=loaded)


def test_approvals_mode(snap_compare: Any, demo_db: str) -> None:
    assert snap_compare(app_for(demo_db), terminal_size=SIZE, run_before=loaded, press=["2"])


def test_task_drill_down(snap_compare: Any, demo_db: str) -> None:
    async def open_t3(pilot: Pilot[Any]) -> None:
        await loaded(pilot)
        app = pilot.app
        assert isinstance(app, ClawtowerApp)
        app.open_task("T-3")
        for _ in range(100):
            await pilot.pause(0.02)
            if getattr(app.screen, "detail", None) is not None:
                break
        await pilot.pause()

    assert snap_compare(app_for(demo_db), terminal_size=SIZE, run_before=open_t3)


async def approvals_shown(pilot: Pilot[Any]) -> None:
    """Mode 2 mounted with an approval selected: a key pressed before that (a busy machine)
    finds no list to act on."""
    await loaded(pilot)
    app = pilot.app
    await pilot.press("2")
    for _ in range(500):
        screen = app.screen
        if (isinstance(screen, ApprovalsScreen) and screen.is_mounted
                and screen.query_one(ApprovalList).cursor_key is not None):
            break
        await pilot.pause(0.02)


def test_approve_confirmation_light_theme(snap_compare: Any, demo_db: str) -> None:
    assert snap_compare(app_for(demo_db, "clawtower-light"), terminal_size=SIZE,
                        run_before=approvals_shown, press=["a"])


def test_sessions_mode_without_sessions(snap_compare: Any, demo_db: str) -> None:
    assert snap_compare(app_for(demo_db), terminal_size=SIZE, run_before=loaded, press=["4"])
