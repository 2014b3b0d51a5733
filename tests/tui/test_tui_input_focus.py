"""Issue 39, first hour (second pass), console traps 1 and 6.

1. A text box never holds the keyboard: esc leaves every Input and TextArea of every mode
   (the keyboard goes back to the mode's list, where the mode keys work again), and mode 4's
   message line, which keeps the keyboard after a send (steers come in a row), says so.
   A dialog's text box: esc closes the dialog, as before.
6. Until the store's first load is in, every list of every mode says "loading…", never its
   empty-state text ("no tasks yet — create one with …" made the demo look broken); only
   then its empty text. The store's opening is held by the test, so nothing depends on timing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, TextArea
from tui_helpers import SIZE, copy_store, shown, until

from clawtower.core import open_store
from clawtower.core.demo.sessions import seed_sessions
from clawtower.tui import app as tui_app
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.modals import JsonAnswerScreen, MemoryEditScreen, ReasonScreen
from clawtower.tui.rowlist import RowList
from clawtower.tui.screens.sessions import SessionList, SessionsScreen
from clawtower.tui.screens.tasks import TasksScreen

MODES = {"1": "tasks", "2": "approvals", "3": "meetings", "4": "sessions", "5": "workflows",
         "6": "experts", "7": "flows", "8": "triggers"}


async def _seed(path: Path) -> None:
    store = await open_store(path)
    try:
        await seed_sessions(store, live=False)
    finally:
        await store.close()


@pytest.fixture(scope="module")
def sessions_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sessions") / "store.db"
    asyncio.run(_seed(path))
    return path


@pytest.fixture
def sessions_db(sessions_template: Path, tmp_path: Path) -> str:
    return copy_store(sessions_template, tmp_path / "store.db")


def first_line(lst: RowList) -> str:
    """The list's first line under its header (an empty list's text)."""
    return lst.render_line(1).text.strip()


# ------------------------------------------------------------------ trap 1


async def test_esc_leaves_mode_4s_message_line_and_the_box_says_so(sessions_db: str) -> None:
    app = ClawtowerApp(sessions_db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded(10)
        await pilot.press("4")
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen))
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        await until(pilot, lambda: screen.detail is not None and screen.detail["id"] == "S-1")
        line = screen.query_one("#ses-input", Input)
        assert "esc" in str(line.border_subtitle) and "esc" in line.placeholder
        await pilot.press("i")
        assert line.has_focus
        await pilot.press(*"steer one", "enter")
        # a send keeps the keyboard (the next steer is typed at once) ...
        assert line.has_focus and line.value == ""
        await pilot.press(*"half typed")
        # ... and esc leaves: the list has it again, the mode keys work
        await pilot.press("escape")
        assert screen.query_one(SessionList).has_focus
        assert line.value == "half typed"  # nothing typed is lost
        await pilot.press("1")
        await until(pilot, lambda: isinstance(app.screen, TasksScreen))
        assert line.value == "half typed"  # "1" switched modes, it was not typed


async def test_esc_leaves_every_text_box_of_every_mode(sessions_db: str) -> None:
    app = ClawtowerApp(sessions_db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded(10)
        seen = []
        for key, mode in MODES.items():
            await pilot.press(key)
            await until(pilot, lambda mode=mode: app.current_mode == mode)  # type: ignore[misc]
            await pilot.pause()
            screen = app.screen
            if mode == "tasks" or mode == "approvals":
                await pilot.press("slash")  # the filter bar is a text box too
                await pilot.pause()
            for box in list(screen.query(Input)) + list(screen.query(TextArea)):
                if box.disabled or not box.display:
                    continue
                box.focus()
                await pilot.pause()
                assert box.has_focus
                await pilot.press("escape")
                await pilot.pause()
                assert not box.has_focus, f"mode {key}: esc stayed in {box!r}"
                assert app.screen is screen
                seen.append(box.id)
        assert "ses-input" in seen and "filter-bar" in seen


@pytest.mark.parametrize("dialog", [
    lambda: ReasonScreen("Reject A-1?"),
    lambda: JsonAnswerScreen("Answer", "what?", {"type": "object"}),
    lambda: MemoryEditScreen("Correct m", "the content"),
], ids=["reason", "json-answer", "memory-edit"])
async def test_esc_in_a_dialogs_text_box_closes_the_dialog(sessions_db: str,
                                                          dialog: Any) -> None:
    app = ClawtowerApp(sessions_db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded(10)
        for index in range(2):  # each of its text boxes (a memory correction has two)
            results: list[Any] = []
            app.push_screen(dialog(), results.append)
            await pilot.pause()
            boxes = list(app.screen.query(Input)) + list(app.screen.query(TextArea))
            if index >= len(boxes):
                app.pop_screen()
                await pilot.pause()
                break
            boxes[index].focus()
            await pilot.pause()
            await pilot.press("escape")
            await pilot.pause()
            assert isinstance(app.screen, TasksScreen), (index, boxes[index])
            assert results == [None]


async def test_esc_closes_the_command_line(sessions_db: str) -> None:
    app = ClawtowerApp(sessions_db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded(10)
        await pilot.press("colon")
        await pilot.pause()
        assert app.focused is not None and app.focused.id == "command-input"
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, TasksScreen)


# ------------------------------------------------------------------ trap 6


async def test_every_list_says_loading_until_the_first_load_then_its_empty_text(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = asyncio.Event()
    opening = asyncio.Event()
    real_open = tui_app.open_store

    async def held_open(path: Any) -> Any:
        opening.set()
        await release.wait()
        return await real_open(path)

    monkeypatch.setattr(tui_app, "open_store", held_open)
    app = ClawtowerApp(str(tmp_path / "empty.db"), run_engine=False, operator="alice")

    screens: dict[str, Any] = {}  # each mode's screen, as it was opened

    def lists(mode: str) -> list[RowList]:
        return list(screens[mode].query(RowList))

    def bodies(mode: str) -> str:
        found = screens[mode].query(f"#{mode}-body")
        return shown(found.first(), width=SIZE[0]) if found else ""

    async with app.run_test(size=SIZE) as pilot:
        await asyncio.wait_for(opening.wait(), 10)
        for key, mode in MODES.items():  # every mode opened while the store loads
            await pilot.press(key)
            await until(pilot, lambda mode=mode: app.current_mode == mode)  # type: ignore[misc]
            await pilot.pause()
            screens[mode] = app.screen
        assert not app.loaded.is_set()
        listed = 0
        for mode in MODES.values():
            for lst in lists(mode):
                listed += 1
                assert first_line(lst) == "loading…", (mode, lst.id, first_line(lst))
                assert lst.empty_text not in first_line(lst)
        assert listed >= 8  # tasks, events, approvals, events, meetings, sessions, runs, flows
        # (mode 6's experts are read from disk, not the store: true at once)
        assert "loading…" in bodies("triggers"), bodies("triggers")
        for mode, prefix in (("meetings", "mtg"), ("sessions", "ses"), ("workflows", "wf"),
                             ("flows", "flo")):
            head = shown(screens[mode].query_one(f"#{prefix}-head"))
            assert "Loading…" in head and "yet" not in head, (mode, head)

        release.set()
        await app.wait_loaded(10)
        for mode in MODES.values():
            for lst in lists(mode):
                # (cut to the list's width)
                await until(pilot, lambda lst=lst: first_line(lst).rstrip("…")  # type: ignore[misc]
                            in lst.empty_text and first_line(lst) != "loading…")
        await until(pilot, lambda: "loading…" not in bodies("triggers"))
        assert "none" in bodies("triggers")
