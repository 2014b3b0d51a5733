"""Mode 3, meetings: live from another process, started, stopped and granted from the console."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from textual.pilot import Pilot
from textual.widgets import Input
from tui_helpers import SIZE, until

from clawtower.core import Meetings, open_store
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.modals import ConfirmScreen
from clawtower.tui.screens.meetings import MeetingsScreen
from clawtower.tui.seed import seed_meetings

ROOT = Path(__file__).resolve().parents[2]


def make_app(db: str, **kw: Any) -> ClawtowerApp:
    kw.setdefault("run_engine", False)
    kw.setdefault("operator", "alice")
    return ClawtowerApp(db, **kw)


def script_file(tmp_path: Path, *, delay_ms: int = 0) -> str:
    """ada always agrees, ben always disagrees: no consensus, ever."""
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump({
        "seed": 3, "speed": 1.0, "delay_ms": [delay_ms, delay_ms],
        "agents": {"ada": {"role": "participant"}, "ben": {"role": "participant"},
                   "cyd": {"role": "participant"}, "scribe": {"role": "summarizer"}},
        "scripts": {"ada": {"meeting": [{"stance": "AGREE"}]},
                    "ben": {"meeting": [{"stance": "DISAGREE"}]}},
    }))
    return str(path)


async def meeting_in(db: str, meeting_id: str | None = None) -> dict[str, Any]:
    store = await open_store(db)
    try:
        if meeting_id is None:
            [m] = await Meetings(store).list()
            meeting_id = m["id"]
        return await Meetings(store).get(meeting_id)
    finally:
        await store.close()


OTHER_PROCESS = """
import asyncio, os, sys
from clawtower.core import AgentSet, MeetingConfig, load_script, open_store
from clawtower.core.meetings.coordinator import Coordinator

class Gated(Coordinator):
    # with a gate folder: round N's participants answer once the file go-N is there
    async def _ask(self, mid, topic, config, agent, rnd, *rest):
        if GATE:
            for _ in range(6000):
                if os.path.exists(os.path.join(GATE, f"go-{rnd}")):
                    break
                await asyncio.sleep(0.01)
        return await super()._ask(mid, topic, config, agent, rnd, *rest)

async def main(db, script):
    store = await open_store(db)
    try:
        await Gated(store, AgentSet.simulated(load_script(script))).run(
            MeetingConfig(topic="Ship on Friday?", participants=["ada", "ben", "cyd"],
                          max_rounds=3), meeting_id="mtg-other")
    finally:
        await store.close()

GATE = sys.argv[3] if len(sys.argv) > 3 else ""
asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_a_meeting_in_another_process_is_watched_round_by_round(
        release_db: str, tmp_path: Path) -> None:
    app = make_app(release_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("3")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, MeetingsScreen)
        assert app.model.meetings == []
        # each round waits until the console has shown it running (a file per round): the
        # console must see every round as it is written, however slow the machine
        proc = subprocess.Popen([sys.executable, "-c", OTHER_PROCESS, release_db,
                                 script_file(tmp_path), str(tmp_path)], cwd=ROOT)
        try:
            seen: list[tuple[str, int]] = []

            def watch() -> bool:
                d = screen.detail
                if d is not None and d["id"] == "mtg-other":
                    state = (d["status"], len(d["rounds"]))
                    if not seen or seen[-1] != state:
                        seen.append(state)
                    if d["status"] == "running" and d["rounds"]:
                        (tmp_path / f"go-{len(d['rounds'])}").touch()
                    return d["status"] == "ended"
                return False

            await until(pilot, watch, timeout=30)
        finally:
            assert await asyncio.to_thread(proc.wait, 30) == 0
        # it appeared while running and its rounds advanced as they were written
        running_rounds = [n for status, n in seen if status == "running"]
        assert {1, 2, 3} <= set(running_rounds), seen
        assert seen[-1] == ("ended", 3)
        # the list is re-read on the poll after the detail's own fetch saw the end
        await until(pilot, lambda: app.model.meetings[0]["status"] == "ended", timeout=10)
        [m] = app.model.meetings
        assert (m["id"], m["status"], m["reason"]) == ("mtg-other", "ended", "max_rounds")
        assert screen.query_one("#mtg-stances").display
        table_rows = [r["round"] for r in screen.detail["rounds"]]  # type: ignore[index]
        assert table_rows == [1, 2, 3]


async def test_a_meeting_whose_process_is_killed_shows_orphaned_and_stops_at_once(
        release_db: str, tmp_path: Path) -> None:
    import os
    import signal

    from clawtower.tui.views import meeting_outcome

    app = make_app(release_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("3")
        proc = subprocess.Popen([sys.executable, "-c", OTHER_PROCESS, release_db,
                                 script_file(tmp_path, delay_ms=3000)], cwd=ROOT)
        try:
            await until(pilot, lambda: bool(app.model.meetings)
                        and app.model.meetings[0]["status"] == "running", timeout=30)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            await asyncio.to_thread(proc.wait, 30)
        # no event says it died: the console's quiet poll sees its process gone
        await until(pilot, lambda: bool(app.model.meetings[0]["orphaned"]), timeout=15)
        assert meeting_outcome(app.model.meetings[0]) == "orphaned"
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: app.model.meetings[0]["status"] == "ended", timeout=15)
    m = await meeting_in(release_db, "mtg-other")
    assert (m["status"], m["reason"], m["orphaned"]) == ("ended", "stopped", False)
    assert "its process gone" in m["detail"]


async def test_start_a_meeting_from_the_command_line(release_db: str, tmp_path: Path) -> None:
    app = make_app(release_db, agents_file=script_file(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("colon")
        await pilot.pause()
        app.screen.query_one(Input).value = "meeting ada,ben,cyd Should we ship on Friday?"
        await pilot.press("enter")
        await until(pilot, lambda: bool(app.model.meetings)
                    and app.model.meetings[0]["status"] == "ended", timeout=30)
        assert app.current_mode == "meetings"
        screen = app.screen
        assert isinstance(screen, MeetingsScreen)
        await until(pilot, lambda: screen.detail is not None
                    and screen.detail["status"] == "ended")
        # bad input is a notification, not a crash
        await pilot.press("colon")
        await pilot.pause()
        app.screen.query_one(Input).value = "meeting ada,zed Who is zed?"
        await pilot.press("enter")
        await until(pilot, lambda: any("unknown agent zed" in n.message
                                       for n in app._notifications))
        assert app.is_running and len(app.model.meetings) == 1
    m = await meeting_in(release_db)
    assert m["topic"] == "Should we ship on Friday?"
    assert m["participants"] == ["ada", "ben", "cyd"]
    assert (m["status"], m["reason"], len(m["rounds"])) == ("ended", "max_rounds", 5)


async def test_stop_and_grant_rounds_from_the_keyboard(release_db: str, tmp_path: Path) -> None:
    app = make_app(release_db, agents_file=script_file(tmp_path, delay_ms=300))
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        app.start_meeting(["ada", "ben", "cyd"], "Ship on Friday?", max_rounds=2)
        await until(pilot, lambda: isinstance(app.screen, MeetingsScreen)
                    and app.screen.detail is not None, timeout=10)
        mid = app.model.meetings[0]["id"]
        await pilot.press("plus")
        await until(pilot, lambda: app.model.meetings[0]["max_rounds"] == 3, timeout=10)
        await pilot.press("colon")
        await pilot.pause()
        app.screen.query_one(Input).value = f"grant {mid} 2"
        await pilot.press("enter")
        await until(pilot, lambda: app.model.meetings[0]["max_rounds"] == 5, timeout=10)
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert app.focused is not None and app.focused.id == "no"
        await pilot.press("y")
        await until(pilot, lambda: app.model.meetings[0]["status"] == "ended", timeout=15)
        # ended: stopping or granting again is refused by core, shown as a notification
        app.grant_rounds(mid, 1)
        await until(pilot, lambda: any("already ended" in n.message
                                       for n in app._notifications))
    m = await meeting_in(release_db, mid)
    assert m["max_rounds"] == 5
    assert m["stop_requested"] and m["stop_by"] == "alice"
    assert m["reason"] == "stopped"
    assert len(m["rounds"]) < 5


@pytest.fixture(scope="session")
def meetings_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("meetings") / "store.db"
    asyncio.run(seed_meetings(path))
    return path


def test_meetings_mode_snapshot(snap_compare: Any, meetings_template: Path,
                                tmp_path: Path) -> None:
    from tui_helpers import copy_store

    db = copy_store(meetings_template, tmp_path / "store.db")

    async def loaded(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, ClawtowerApp)
        await app.wait_loaded()
        await pilot.press("3")
        screen = app.screen
        assert isinstance(screen, MeetingsScreen)
        for _ in range(200):
            await pilot.pause(0.02)
            if screen.detail is not None:
                break
        await pilot.pause()

    assert snap_compare(make_app(db), terminal_size=SIZE, run_before=loaded)


async def test_palette_starts_a_meeting_via_the_command_line(release_db: str) -> None:
    from clawtower.tui.modals import CommandLineScreen

    app = make_app(release_db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("ctrl+p", *"start a meeting")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, CommandLineScreen))
        assert app.screen.query_one(Input).value == "meeting "
