"""Small frictions: a filtered list's title counts what it shows, review verdicts read one
way, and an 80x24 terminal still shows the engine's state."""

from __future__ import annotations

from tui_helpers import shown, until

from clawtower.tui.app import ClawtowerApp
from clawtower.tui.screens.task_detail import TaskDetailScreen
from clawtower.tui.screens.tasks import TasksScreen
from clawtower.tui.views import ModeBar, TaskList


def make_app(db: str) -> ClawtowerApp:
    return ClawtowerApp(db, run_engine=False, operator="alice")


async def test_the_title_counts_what_the_filter_shows(demo_db: str) -> None:
    app = make_app(demo_db)
    async with app.run_test(size=(140, 40)) as pilot:
        await app.wait_loaded()
        lst = app.screen.query_one(TaskList)
        total = len(app.model.tasks)
        assert str(lst.border_title).startswith(f"Tasks · {total} ·")
        await pilot.press("slash", *"invoice")
        await until(pilot, lambda: lst.filter_text == "invoice")
        shown_rows = lst.visible_count
        assert 0 < shown_rows < total
        assert str(lst.border_title).startswith(f"Tasks · {shown_rows} of {total} ·")
        await pilot.press("escape")
        await until(pilot, lambda: not lst.filter_text)
        assert str(lst.border_title).startswith(f"Tasks · {total} ·")


async def test_review_verdicts_read_one_way(demo_db: str) -> None:
    app = make_app(demo_db)
    async with app.run_test(size=(140, 40)) as pilot:
        await app.wait_loaded()
        done = next(t for t, r in app.model.tasks.items() if r["phase"] == "completed")
        app.open_task(done)
        await until(pilot, lambda: isinstance(app.screen, TaskDetailScreen)
                    and app.screen.detail is not None)
        await pilot.pause(0.1)
        text = shown(app.screen.query_one("#sec-reviews"))
        # a spec review ("approved") and a quality review ("approve") say the same word
        assert "approved" in text and " approve " not in f" {text} ".replace("\n", " ")


async def test_80x24_keeps_the_engine_state(demo_db: str) -> None:
    app = make_app(demo_db)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.wait_loaded()
        await until(pilot, lambda: isinstance(app.screen, TasksScreen))
        await pilot.pause(0.1)
        bar = app.screen.query_one(ModeBar)
        text = str(bar.render())
        assert "engine: none" in text, text
        assert len(text) <= 80
        # every mode's key shows (the labels give way), the current one named
        assert " 1 Tasks " in text and all(f" {k} " in text or f" {k} (" in text
                                             for k in "2345678"[:len(ModeBar.MODES) - 1]), text
