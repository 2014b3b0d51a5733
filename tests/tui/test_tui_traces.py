"""`w` in modes 4, 7 and 5: the selected session's, flow's or workflow run's trace as a
waterfall in a modal that scrolls (the same derivation and drawing as `clawtower trace`),
listed in `?`; `esc` closes it; nothing selected, the key says why."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from tui_helpers import SIZE, copy_store, shown, until

from clawtower.core import open_store
from clawtower.core.demo.flows import seed_flows
from clawtower.core.demo.sessions import seed_sessions
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.screens.flows import FlowsScreen, FlowTree
from clawtower.tui.screens.sessions import SessionList, SessionsScreen
from clawtower.tui.screens.workflows import WorkflowsScreen
from clawtower.tui.seed import seed_workflows
from clawtower.tui.traceview import TraceScreen

ROOT = Path(__file__).resolve().parents[2]


async def _seed(path: Path) -> None:
    await seed_workflows(path)
    store = await open_store(path)
    try:
        await seed_sessions(store, live=False)
        await seed_flows(store, ROOT / "examples" / "demo" / "agents.yaml", live=False)
    finally:
        await store.close()


@pytest.fixture(scope="module")
def traces_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "store.db"
    asyncio.run(_seed(path))
    return path


@pytest.fixture
def db(traces_template: Path, tmp_path: Path) -> str:
    return copy_store(traces_template, tmp_path / "store.db")


async def waterfall(pilot: Pilot[Any]) -> TraceScreen:
    """Press `w`; the modal, once its trace is drawn."""
    await pilot.press("w")
    app = pilot.app
    await until(pilot, lambda: isinstance(app.screen, TraceScreen) and app.screen.loaded)
    modal = app.screen
    assert isinstance(modal, TraceScreen)
    return modal


async def test_w_shows_the_selected_sessions_trace(db: str) -> None:
    app = ClawtowerApp(db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen))
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        assert "`w` shows" in screen.HELP
        await until(pilot, lambda: screen.selected == "S-1")
        modal = await waterfall(pilot)
        text = "\n".join(modal.lines)
        assert text.startswith("trace ") and "session S-1" in modal.lines[0]
        for name in ("session S-1 (lead)", "invoke_agent lead", "chat sim-standard",
                     "execute_tool spawn_subagents", "session S-2 (worker)",
                     "session S-4 (worker)"):
            assert name in text, name
        assert "session S-5" not in text  # another trace
        assert "invoke_agent lead" in shown(modal.query_one("#trace-body"), width=400)
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen)
        # a subagent's trace is its parent's tree
        screen.query_one(SessionList).move_cursor_to_key("S-3")
        await until(pilot, lambda: screen.selected == "S-3")
        modal = await waterfall(pilot)
        assert "session S-1" in modal.lines[0]
        await pilot.press("w")  # w closes it too
        await until(pilot, lambda: app.screen is screen)


async def test_w_shows_the_selected_flows_trace_from_any_of_its_nodes(db: str) -> None:
    app = ClawtowerApp(db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("7")
        await until(pilot, lambda: isinstance(app.screen, FlowsScreen))
        screen = app.screen
        assert isinstance(screen, FlowsScreen)
        assert "`w` shows" in screen.HELP
        await until(pilot, lambda: any(r["id"] == "F-1/q3-brief/q3-figures"
                                       for r in screen.rows))
        screen.query_one(FlowTree).move_cursor_to_key("F-1/q3-brief/q3-figures")
        await until(pilot, lambda: screen.selected == "F-1/q3-brief/q3-figures")
        modal = await waterfall(pilot)
        text = "\n".join(modal.lines)
        assert "flow F-1" in modal.lines[0]
        for name in ("invoke_workflow F-1", "node F-1/q3-brief planner",
                     "node F-1/q3-brief/q3-figures analyst",
                     "node F-1/q3-brief/q3-figures/q3-sales fetcher"):
            assert name in text, name
        assert "F-2" not in text
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen)


async def test_w_shows_the_selected_runs_trace_with_its_gate_wait(db: str) -> None:
    app = ClawtowerApp(db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("5")
        await until(pilot, lambda: isinstance(app.screen, WorkflowsScreen)
                    and app.screen.selected is not None)
        screen = app.screen
        assert isinstance(screen, WorkflowsScreen)
        assert "`w` shows" in screen.HELP
        run = screen.selected
        modal = await waterfall(pilot)
        text = "\n".join(modal.lines)
        assert f"workflow {run}" in modal.lines[0]
        assert "invoke_workflow " in text and "step " in text and "gate " in text
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen)


async def test_w_with_nothing_selected_says_why(tmp_path: Path) -> None:
    db = str(tmp_path / "empty.db")
    store = await open_store(db)
    await store.close()
    app = ClawtowerApp(db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("4")
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen))
        await pilot.press("w")
        await until(pilot, lambda: any("no session selected" in str(n.message)
                                       for n in app._notifications))
        assert not isinstance(app.screen, TraceScreen)
