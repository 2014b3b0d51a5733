"""Mode 4's memory panel (issue 25 item 4): what each turn recalled, the agent's memories,
and an operator's correction and forget (each one event naming the operator and why)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, TextArea
from tui_helpers import SIZE, copy_store, shown, until

from clawtower.core import open_store
from clawtower.core.memory.service import Memories
from clawtower.core.sessions.service import Sessions
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.modals import ConfirmScreen, MemoryEditScreen, ReasonScreen
from clawtower.tui.screens.memory import MemoryList, SessionMemoryScreen
from clawtower.tui.screens.sessions import SessionsScreen
from tests.helpers.session_helpers import runner, spec


async def _seed(path: Path) -> None:
    """Agent alpha (it reads agent:alpha and shared:team) and one session of two turns:
    the first recalls the cat, the second the lunch."""
    store = await open_store(path)
    try:
        sessions, mem = Sessions(store), Memories(store)
        await spec(sessions, "alpha", policy={"memory": ["agent:alpha", "shared:*"]},
                   context_policy={"recall": {"namespaces": ["agent:alpha", "shared:team"]}})
        await mem.put("agent:alpha", "cat", "The user's cat is called Miso", by="alpha",
                      category="user")
        await mem.put("shared:team", "lunch", "Team lunch: noon on Fridays", by="bob")
        await mem.put("agent:beta", "secret", "beta's own secret", by="beta")
        sid = await sessions.create(agent="alpha")
        for text in ("cat called?", "Fridays lunch?"):
            await sessions.send(sid, text)
            r, _ = runner(store)
            try:
                assert await r.run_until_idle(30, {sid})
            finally:
                await r.aclose()
    finally:
        await store.close()


@pytest.fixture(scope="module")
def memory_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("memory") / "store.db"
    asyncio.run(_seed(path))
    return path


@pytest.fixture
def db(memory_template: Path, tmp_path: Path) -> str:
    return copy_store(memory_template, tmp_path / "store.db")


def _app(db: str) -> ClawtowerApp:
    return ClawtowerApp(db, run_engine=False, operator="alice")


async def _panel(app: ClawtowerApp, pilot: Any) -> SessionMemoryScreen:
    await pilot.press("4")
    await until(pilot, lambda: isinstance(app.screen, SessionsScreen)
                and app.screen.detail is not None)
    await pilot.press("m")
    await until(pilot, lambda: isinstance(app.screen, SessionMemoryScreen)
                and len(app.screen.memories) == 2 and app.screen.detail is not None)
    screen = app.screen
    assert isinstance(screen, SessionMemoryScreen)
    return screen


async def _events(db: str, type_: str) -> list[dict[str, Any]]:
    store = await open_store(db)
    try:
        rows = await store.fetchall("SELECT actor, entity_id, payload FROM events WHERE"
                                    " type=? ORDER BY seq", (type_,))
        return [{**r, "payload": json.loads(r["payload"])} for r in rows]
    finally:
        await store.close()


async def test_the_panel_shows_what_each_turn_recalled_and_the_agents_memories(
        db: str) -> None:
    app = _app(db)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen)
                    and app.screen.detail is not None)
        # the session's detail says what its last turn recalled
        recalled = shown(app.screen.query_one("#ses-recalled"))
        assert "shared:team lunch" in recalled and "agent:alpha cat" not in recalled
        screen = await _panel(app, pilot)
        lst = screen.query_one(MemoryList)
        # its own namespace and the shared one its policy names; never beta's
        assert sorted(str(k) for k in lst._data) == ["agent:alpha/cat", "shared:team/lunch"]
        assert screen.namespaces == ["agent:alpha", "shared:team"]
        marked = {k: d["recalled"] for k, d in lst._data.items()}
        assert marked["shared:team/lunch"] is not None and marked["agent:alpha/cat"] is None
        text = shown(screen.query_one("#mem-recalled"))
        assert text.index("shared:team lunch") < text.index("agent:alpha cat")  # newest first
        await pilot.press("t")  # the older turn: it recalled the cat
        await until(pilot, lambda: lst._data["agent:alpha/cat"]["recalled"] is not None)
        assert lst._data["shared:team/lunch"]["recalled"] is None
        lst.move_cursor_to_key("agent:alpha/cat")
        await until(pilot, lambda: screen.detail is not None
                    and screen.detail["key"] == "cat")
        detail = shown(screen.query_one("#mem-memory"))
        assert "The user's cat is called Miso" in detail and "alpha" in detail
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen))


async def test_an_operator_corrects_and_forgets_a_memory(db: str) -> None:
    app = _app(db)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _panel(app, pilot)
        screen.query_one(MemoryList).move_cursor_to_key("agent:alpha/cat")
        await until(pilot, lambda: screen.detail is not None
                    and screen.detail["key"] == "cat")
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, MemoryEditScreen))
        edit = app.screen
        edit.query_one(TextArea).text = "The user's cat is called Mochi"
        await pilot.press("ctrl+s")  # no reason yet: the dialog stays and says so
        await pilot.pause(0.05)
        assert app.screen is edit and "say why" in shown(edit.query_one("#answer-error"))
        edit.query_one("#memory-reason", Input).value = "the cat was renamed"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: screen.detail is not None
                    and "Mochi" in str(screen.detail["content"]))
        assert screen.detail is not None and screen.detail["updated_by"] == "alice"

        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ReasonScreen))
        app.screen.query_one(Input).value = "the user asked us to forget it"
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: isinstance(app.screen, SessionMemoryScreen)
                    and "agent:alpha/cat" not in screen.query_one(MemoryList)._data)
    stored = await _events(db, "memory.stored")
    assert (stored[-1]["actor"], stored[-1]["payload"]["reason"],
            stored[-1]["payload"]["category"]) == ("alice", "the cat was renamed", "user")
    [forgot] = await _events(db, "memory.forgotten")
    assert (forgot["actor"], forgot["entity_id"], forgot["payload"]["reason"]) == (
        "alice", "agent:alpha/cat", "the user asked us to forget it")


async def test_the_panel_fits_80x24(db: str) -> None:
    app = _app(db)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _panel(app, pilot)
        await pilot.pause(0.1)
        svg = app.export_screenshot()
        for word in ("Correct", "Forget", "Turn", "Memories", "Recalled"):
            assert word in svg, word
        lst = screen.query_one(MemoryList)
        detail = screen.query_one("#mem-detail")
        assert lst.region.width >= 30 and detail.region.width >= 30
        assert lst.region.bottom <= 24 and detail.region.right <= 80
