"""Mode 4, sessions: the session tree, transcript, announces and backlog; the input line
(messages, steering, /commands); live updates from another store connection; the console's
own worker running a queued fan-out."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input
from tui_helpers import SIZE, copy_store, shown, until

from clawtower.core import open_store
from clawtower.core.demo.sessions import seed_sessions
from clawtower.core.sessions.service import Sessions
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.screens.sessions import SessionList, SessionsScreen


async def _seed(path: Path, live: bool) -> None:
    store = await open_store(path)
    try:
        await seed_sessions(store, live=live)
    finally:
        await store.close()


@pytest.fixture(scope="module")
def sessions_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sessions") / "store.db"
    asyncio.run(_seed(path, live=False))
    return path


@pytest.fixture
def db(sessions_template: Path, tmp_path: Path) -> str:
    return copy_store(sessions_template, tmp_path / "store.db")


def make_app(db: str, **kw: Any) -> ClawtowerApp:
    kw.setdefault("run_engine", False)
    kw.setdefault("operator", "alice")
    return ClawtowerApp(db, **kw)


async def test_tree_transcript_announces_and_backlog(db: str) -> None:
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen))
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        await until(pilot, lambda: len(screen.rows) == 5)
        assert [(r["id"], r["depth"]) for r in screen.rows] == [
            ("S-1", 0), ("S-2", 1), ("S-3", 1), ("S-4", 1), ("S-5", 0)]
        await until(pilot, lambda: screen.detail is not None and screen.detail["id"] == "S-1")
        transcript = shown(screen.query_one("#ses-transcript"))
        assert "Synthesis of 3 subagent result(s)" in transcript
        # an announce shows what the child said, not the wire marker (issue 27, item 9)
        assert "[@agent:worker#" not in transcript
        for child, part in (("S-2", 1), ("S-3", 2), ("S-4", 3)):
            assert f'{child} @worker ok: worker: got it: "part {part} of 3' in transcript
        announces = shown(screen.query_one("#ses-announces"))
        assert announces.count(" ok ") >= 3 and "S-2" in announces
        screen.query_one(SessionList).move_cursor_to_key("S-5")
        await until(pilot, lambda: screen.detail is not None and screen.detail["id"] == "S-5")
        transcript = shown(screen.query_one("#ses-transcript"))
        assert "user (steer)" in transcript and "[Backlog]" in transcript
        assert "Resumed and finished" in transcript


async def test_input_line_sends_steers_and_runs_commands(db: str) -> None:
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        await until(pilot, lambda: screen.detail is not None and screen.detail["id"] == "S-1")
        await pilot.press("i")
        line = screen.query_one("#ses-input", Input)
        assert line.has_focus
        line.value = "/agent worker"
        await pilot.press("enter")
        await until(pilot, lambda: screen.detail is not None
                    and screen.detail["agent"] == "worker")
        line.value = "/agent nobody"
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert screen.detail["agent"] == "worker"  # an unknown spec changes nothing
        line.value = "what did the reviewers find?"
        await pilot.press("enter")
        # no worker runs in this console: the message waits, shown in the backlog pane
        await until(pilot, lambda: "what did the reviewers find?" in shown(
            screen.query_one("#ses-backlog")))
        assert screen.detail["status"] == "queued"
    store = await open_store(db)
    try:
        s = await Sessions(store).get("S-1")
        assert s["pending"][-1]["text"] == "what did the reviewers find?"
        refusals = await store.fetchall("SELECT * FROM events WHERE type='session.agent_switched'")
        assert len(refusals) == 1
    finally:
        await store.close()


async def test_updates_live_when_another_connection_writes(db: str) -> None:
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        await until(pilot, lambda: len(screen.rows) == 5)
        other = await open_store(db)
        try:
            sid = await Sessions(other).create(agent="worker", title="from elsewhere")
        finally:
            await other.close()
        await until(pilot, lambda: any(r["id"] == sid for r in screen.rows))


async def test_console_worker_runs_a_queued_fan_out(tmp_path: Path) -> None:
    home = Path(__import__("os").environ["CLAWTOWER_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "clawtower.yaml").write_text("speed: 0\n")
    db = str(tmp_path / "live.db")
    await _seed(Path(db), live=True)
    app = make_app(db, run_engine=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        await until(pilot, lambda: any(r["id"] == "S-6" for r in screen.rows))
        await until(pilot, lambda: sum(1 for r in screen.rows if r.get("parent_id") == "S-6"
                                       and r["status"] == "finished") == 4, timeout=30)
        screen.query_one(SessionList).move_cursor_to_key("S-6")
        await until(pilot, lambda: screen.detail is not None and "Synthesis of 4" in shown(
            screen.query_one("#ses-transcript")), timeout=30)


async def test_transcript_streams_while_the_consoles_worker_runs_a_turn(tmp_path: Path) -> None:
    home = Path(__import__("os").environ["CLAWTOWER_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "clawtower.yaml").write_text("speed: 1\ndelay_ms: [1500, 1500]\n")
    db = str(tmp_path / "stream.db")
    store = await open_store(db)
    try:
        sid = await Sessions(store).create(title="streaming")
    finally:
        await store.close()
    app = make_app(db, run_engine=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        await until(pilot, lambda: screen.detail is not None and screen.detail["id"] == sid)
        await pilot.press("i")
        screen.query_one("#ses-input", Input).value = (
            "please repeat this rather long sentence back to me word for word")
        await pilot.press("enter")
        seen: list[str] = []

        def streaming() -> bool:
            text = shown(screen.query_one("#ses-stream"))
            if screen.query_one("#ses-stream").display and "assistant…" in text:
                seen.append(text)
            return bool(seen)

        await until(pilot, streaming, timeout=20)
        assert "default: got" in seen[0]  # the reply's first chunk, before it is committed
        await until(pilot, lambda: screen.detail is not None and any(
            m["role"] == "assistant" for m in screen.detail["messages"]), timeout=20)
        await until(pilot, lambda: not screen.query_one("#ses-stream").display)
        final = shown(screen.query_one("#ses-transcript"))
        assert "word for word" in final


async def test_a_waiting_tool_call_shows_in_the_transcript_and_a_approves_it(
        tmp_path: Path) -> None:
    """A confirm-tier call waits: mode 4 shows it in the selected session's transcript with
    its arguments, and `a` (then `y`) approves it from there (the job is queued again)."""
    from clawtower.core.approvals import Approvals
    from clawtower.core.sessions.specs import AgentSpecConfig
    from tests.helpers.session_helpers import run_idle

    path = tmp_path / "gate.db"
    store = await open_store(path)
    try:
        sessions = Sessions(store)
        await sessions.set_spec("clerk", AgentSpecConfig.model_validate({"policy": {
            "tools": ["clock.now"], "approval": {"default": "confirm"}}}))
        sid = await sessions.create(agent="clerk")
        await sessions.send(sid, '#call clock.now {"timezone": "Europe/Paris"}')
        await run_idle(store, sid)
        [a] = await Approvals(store).pending()
    finally:
        await store.close()
    app = make_app(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        await until(pilot, lambda: screen.detail is not None and screen.detail["id"] == sid)
        transcript = shown(screen.query_one("#ses-transcript"))
        assert "clock.now" in transcript and "Europe/Paris" in transcript
        assert f"waits for you ({a['id']})" in transcript
        screen.query_one(SessionList).focus()
        await pilot.press("a")
        await pilot.pause()
        await pilot.press("y")

        async def decided() -> bool:
            assert app.store is not None
            row = await app.store.fetchone("SELECT status FROM approvals WHERE id=?",
                                           (a["id"],))
            return row is not None and row["status"] == "approved"

        for _ in range(200):
            if await decided():
                break
            await pilot.pause(0.05)
        assert await decided()
        await until(pilot, lambda: screen.detail is not None
                    and not screen.detail.get("approvals"))


async def test_the_input_line_refuses_a_flow_session(tmp_path: Path) -> None:
    """Issue 22 item 6: the console's input refuses a session a flow owns, saying so."""
    from clawtower.core.flows.service import Flows
    from clawtower.core.sessions.specs import AgentSpecConfig

    path = tmp_path / "store.db"
    store = await open_store(path)
    try:
        await Sessions(store).set_spec("lead", AgentSpecConfig())
        fid = await Flows(store).start("lead", "a flow's task")
    finally:
        await store.close()
    app = make_app(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        await until(pilot, lambda: screen.detail is not None and screen.detail["id"] == "S-1")
        await pilot.press("i")
        line = screen.query_one("#ses-input", Input)
        line.value = "hello from outside"
        await pilot.press("enter")
        await until(pilot, lambda: any(f"S-1 belongs to flow {fid}" in n.message
                                       for n in app._notifications))
    store = await open_store(path)
    try:
        assert (await Sessions(store).get("S-1"))["pending"] == []
    finally:
        await store.close()


def test_a_failed_sessions_status_fits_and_flow_sessions_come_after_the_others() -> None:
    """Issue 39: mode 4 cut `finished error` to `finished er…`, and listed the demo's three
    sessions after thirty flow-node sessions."""
    from clawtower.tui.screens.sessions import flatten

    def row(sid: str, by: str, status: str = "idle", result: str = "") -> dict[str, Any]:
        return {"id": sid, "created_by": by, "status": status, "result": result,
                "agent": "ada", "tokens": 0, "cost_usd": 0.0, "title": sid, "children": []}

    forest = [row("S-1", "flow:F-1"), row("S-2", "root"), row("S-3", "flow:F-2"),
              row("S-4", "flow:F-1"), row("S-5", "root", "finished", "error")]
    forest[1]["children"] = [row("S-6", "root")]
    rows = flatten(forest)
    assert [(r["id"], r["depth"]) for r in rows] == [
        ("S-2", 0), ("S-6", 1), ("S-5", 0), ("S-1", 0), ("S-4", 0), ("S-3", 0)]
    status_width = next(c.fit for c in SessionList.columns if c.label == "Status")
    cells = SessionList.row_cells(SessionList(), "S-5", rows[2])
    text, tone = cells[1]
    assert (text, tone) == ("error", "failed") and len(text) <= status_width
    assert SessionList.row_cells(SessionList(), "S-2", rows[0])[1][0] == "idle"
