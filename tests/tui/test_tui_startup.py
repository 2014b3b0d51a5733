"""The console paints its frame and first mode before the store has loaded (issue 27, item 8:
blank for ~6 s before). The store's opening is held open by the test, so the check does not
depend on timing: the old console, which opened and loaded the store before its first paint,
never painted at all here (and this test failed on its timeout). Time to first paint is
measured in benchmarks/bench_console_startup.py, not here."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tui_helpers import SIZE, shown

from clawtower.tui import app as tui_app
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.screens.tasks import TasksScreen
from clawtower.tui.views import ModeBar, TaskList


async def test_the_frame_and_the_modes_paint_before_the_store_loads(
        demo_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    release = asyncio.Event()
    opening = asyncio.Event()
    real_open = tui_app.open_store

    async def held_open(path: Any) -> Any:
        opening.set()
        await release.wait()
        return await real_open(path)

    monkeypatch.setattr(tui_app, "open_store", held_open)
    app = ClawtowerApp(demo_db, run_engine=False, operator="alice")
    painted_while_loading: list[str] = []
    display = app._display

    def recording_display(screen: Any, renderable: Any) -> None:
        # what Textual sends to the terminal (the headless driver only drops it)
        if renderable is not None and not app._batch_count and not app.loaded.is_set():
            painted_while_loading.append(type(screen).__name__)
        display(screen, renderable)

    app._display = recording_display  # type: ignore[method-assign]

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await asyncio.wait_for(opening.wait(), 10)
            await pilot.pause()
            assert not app.loaded.is_set()
            assert isinstance(app.screen, TasksScreen)
            bar = shown(app.screen.query_one(ModeBar), width=SIZE[0])
            for name in ("Tasks", "Approvals", "Meetings", "Sessions", "Workflows", "Experts",
                         "Flows", "Triggers"):
                assert name in bar, bar
            assert "engine: loading" in bar, bar
            assert "TasksScreen" in painted_while_loading
            assert len(app.screen.query_one(TaskList)) == 0
            release.set()
            await app.wait_loaded(10)
            await pilot.pause()
            assert len(app.screen.query_one(TaskList)) > 0
            assert "engine: loading" not in shown(app.screen.query_one(ModeBar),
                                                  width=SIZE[0])

    await asyncio.wait_for(scenario(), 30)


async def test_a_store_that_fails_to_load_ends_the_console_not_leaves_it_loading(
        demo_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken_open(path: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(tui_app, "open_store", broken_open)
    app = ClawtowerApp(demo_db, run_engine=False, operator="alice")

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            for _ in range(500):
                if app.return_code is not None:
                    break
                await pilot.pause(0.01)

    await asyncio.wait_for(scenario(), 30)
    assert app.return_code == 1
    assert not app.loaded.is_set()


async def test_the_demo_seeds_behind_the_painted_frame(tmp_path: Any) -> None:
    """`clawtower demo` hands its seeding to the console as `prepare`: the frame paints
    first (the demo was blank for its ~1.4 s of seeding), the seeded rows follow, and what
    the seeding has to say is a notification, not a print under the console's screen."""
    release = asyncio.Event()
    started = asyncio.Event()
    db = str(tmp_path / "demo.db")

    async def prepare() -> list[str]:
        from clawtower.cli.demo import demo_dir, seed

        started.set()
        await release.wait()
        await seed(db, demo_dir() / "specs", live_sessions=False)
        return ["clawtower demo: no example expert: a test said so"]

    app = ClawtowerApp(db, run_engine=False, operator="alice", prepare=prepare)

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await asyncio.wait_for(started.wait(), 10)
            await pilot.pause()
            assert isinstance(app.screen, TasksScreen) and not app.loaded.is_set()
            assert "Tasks" in shown(app.screen.query_one(ModeBar), width=SIZE[0])
            release.set()
            await app.wait_loaded(20)
            await pilot.pause()
            assert len(app.screen.query_one(TaskList)) > 0
            assert any("a test said so" in str(n.message) for n in app._notifications)

    await asyncio.wait_for(scenario(), 40)
