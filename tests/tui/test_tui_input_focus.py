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
from tui_helpers import SIZE, copy_store, shown, until

from clawtower.core import open_store
from clawtower.core.demo.sessions import seed_sessions
from clawtower.tui import app as tui_app
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.rowlist import RowList

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
