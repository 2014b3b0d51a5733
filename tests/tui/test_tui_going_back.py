"""Going back from the console (issue 37): mode 4's `h` (a session's history) and `f` (fork
it at a turn with an edited message), mode 7's `R` (rerun a flow from a node), mode 5's `R`
(rerun a workflow run from a step). Each new session, flow or run is in the store with its
origin, selected in its mode; the original is untouched; a refusal is core's one line and
writes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import TextArea
from tui_helpers import SIZE, copy_store, shown, until

from clawtower.core import open_store
from clawtower.core.demo.flows import seed_flows
from clawtower.core.demo.sessions import seed_sessions
from clawtower.core.flows.rerun import rerun_origin
from clawtower.core.sessions.service import Sessions
from clawtower.core.workflows.service import Workflows
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.modals import ChoiceScreen, ConfirmScreen, EditTextScreen
from clawtower.tui.screens.flows import FlowsScreen, FlowTree
from clawtower.tui.screens.session_history import SessionHistoryScreen
from clawtower.tui.screens.sessions import SessionList, SessionsScreen
from clawtower.tui.screens.workflows import WorkflowsScreen

ROOT = Path(__file__).resolve().parents[2]
DEMO_AGENTS = ROOT / "examples" / "demo" / "agents.yaml"

THREE_STEPS = """\
name: three
steps:
  - id: fetch
    run: echo fetched
  - id: build
    run: echo built
  - id: ship
    run: echo shipped
"""

FAILS_FIRST = """\
name: broken
steps:
  - id: fetch
    run: exit 3
  - id: build
    run: echo built
"""


async def _seed_sessions(path: Path) -> None:
    store = await open_store(path)
    try:
        await seed_sessions(store, live=False)
    finally:
        await store.close()


async def _seed_flows(path: Path) -> None:
    store = await open_store(path)
    try:
        await seed_flows(store, DEMO_AGENTS, live=False)
    finally:
        await store.close()


@pytest.fixture(scope="module")
def sessions_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sessions") / "store.db"
    asyncio.run(_seed_sessions(path))
    return path


@pytest.fixture(scope="module")
def flows_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("flows") / "store.db"
    asyncio.run(_seed_flows(path))
    return path


def make_app(db: str) -> ClawtowerApp:
    return ClawtowerApp(db, run_engine=False, operator="alice")


async def _read(db: str, fn: Any) -> Any:
    store = await open_store(db)
    try:
        return await fn(store)
    finally:
        await store.close()


async def _session_state(store: Any, sid: str) -> tuple[Any, ...]:
    s = await Sessions(store).get(sid)
    return (s["last_seq"], s["status"], len(s["messages"]), s["turns"], s["origin"])


async def _history_of(pilot: Any, sid: str) -> SessionHistoryScreen:
    app = pilot.app
    await pilot.press("4")
    await until(pilot, lambda: isinstance(app.screen, SessionsScreen))
    screen = app.screen
    assert isinstance(screen, SessionsScreen)
    await until(pilot, lambda: sid in screen._by_id)
    screen.query_one(SessionList).move_cursor_to_key(sid)
    await until(pilot, lambda: screen.detail is not None and screen.detail["id"] == sid)
    await pilot.press("h")
    await until(pilot, lambda: isinstance(app.screen, SessionHistoryScreen)
                and app.screen.first_read)
    history = app.screen
    assert isinstance(history, SessionHistoryScreen)
    return history


async def _fork(pilot: Any, history: SessionHistoryScreen, turn: int, text: str | None
                ) -> None:
    """Select `turn`, `f`, type `text` (None: keep the prefilled message), ctrl+s, `y`."""
    app = pilot.app
    history.item_list.move_cursor_to_key(str(turn))
    await until(pilot, lambda: history.detail is not None and history.detail["n"] == turn)
    await pilot.press("f")
    await until(pilot, lambda: isinstance(app.screen, EditTextScreen))
    if text is not None:
        app.screen.query_one(TextArea).text = text
    await pilot.press("ctrl+s")
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    await pilot.press("y")


async def test_h_lists_the_turns_and_f_forks_one_with_an_edited_message(
        sessions_template: Path, tmp_path: Path) -> None:
    db = copy_store(sessions_template, tmp_path / "store.db")
    before = await _read(db, lambda s: _session_state(s, "S-1"))
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        history = await _history_of(pilot, "S-1")
        assert [t["n"] for t in history.turns] == [1, 2]
        rows = " ".join(" ".join(str(c) for c in history.item_list.row_cells(t["id"], t))
                        for t in history.turns)
        assert "#spawn 3 worker" in rows and "done" in rows
        await until(pilot, lambda: history.detail is not None)
        assert "Spawned 3 of 3 subagent(s)" in shown(history.query_one("#his-turn"))
        await _fork(pilot, history, 1, "review only the CLI module")
        await until(pilot, lambda: any(n.message.startswith("S-6: forked from S-1 at turn 1")
                                       for n in app._notifications))
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        await until(pilot, lambda: screen.selected == "S-6" and screen.detail is not None
                    and screen.detail["id"] == "S-6")
        assert "forked from S-1 at turn 1 by alice" in shown(screen.query_one("#ses-head"))
    fork = await _read(db, lambda s: Sessions(s).get("S-6"))
    assert fork["origin"]["session"] == "S-1" and fork["origin"]["turn"] == 1
    assert fork["origin"]["by"] == "alice"
    assert fork["pending"][-1]["text"] == "review only the CLI module"  # its new turn, queued
    assert await _read(db, lambda s: _session_state(s, "S-1")) == before  # untouched


async def test_forking_a_flows_session_is_refused_with_cores_line(
        flows_template: Path, tmp_path: Path) -> None:
    db = copy_store(flows_template, tmp_path / "store.db")
    sessions = await _read(db, lambda s: Sessions(s).list())
    flow_sid = next(r["id"] for r in sessions if str(r["created_by"]).startswith("flow:")
                    and r["turns"])
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        history = await _history_of(pilot, flow_sid)
        await _fork(pilot, history, 1, "")
        await until(pilot, lambda: any("belongs to flow" in n.message
                                       and n.title.startswith("Not forked: use R")
                                       for n in app._notifications))
    after = await _read(db, lambda s: Sessions(s).list())
    assert len(after) == len(sessions)  # nothing written
    assert not await _read(db, lambda s: s.fetchall(
        "SELECT seq FROM events WHERE type='session.forked'"))


async def test_a_fork_with_an_empty_message_has_no_new_turn(sessions_template: Path,
                                                            tmp_path: Path) -> None:
    db = copy_store(sessions_template, tmp_path / "store.db")
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        history = await _history_of(pilot, "S-5")
        await _fork(pilot, history, 2, "   ")
        screen = app.screen
        await until(pilot, lambda: isinstance(screen, SessionsScreen)
                    and screen.selected == "S-6")
    fork = await _read(db, lambda s: Sessions(s).get("S-6"))
    assert fork["origin"]["turn"] == 2 and fork["status"] == "idle"
    assert not [p for p in fork["pending"] if p["status"] == "pending"]


async def test_R_on_a_flow_node_reruns_it_into_a_new_flow(flows_template: Path,
                                                          tmp_path: Path) -> None:
    db = copy_store(flows_template, tmp_path / "store.db")
    node = "F-1/q3-brief/q3-figures"
    before = await _read(db, lambda s: s.fetchone("SELECT * FROM flows WHERE id='F-1'"))
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("7")
        await until(pilot, lambda: isinstance(app.screen, FlowsScreen))
        screen = app.screen
        assert isinstance(screen, FlowsScreen)
        await until(pilot, lambda: len(screen.rows) == 13)
        screen.query_one(FlowTree).move_cursor_to_key(node)
        await until(pilot, lambda: screen.selected == node)
        await pilot.press("R")
        await until(pilot, lambda: isinstance(app.screen, EditTextScreen))
        app.screen.query_one(TextArea).text = "Collect the Q3 figures, costs first"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: screen.selected == "F-3")
        assert any(n.message == f"F-3: rerun of {node}" for n in app._notifications)
    origin = await _read(db, lambda s: rerun_origin(s, "F-3"))
    assert origin == {"flow": "F-1", "node": node, "by": "alice",
                      "instruction": "Collect the Q3 figures, costs first"}
    after = await _read(db, lambda s: s.fetchone("SELECT * FROM flows WHERE id='F-1'"))
    assert dict(after) == dict(before)  # the original is untouched


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


async def _ran(db: str, file: str) -> dict[str, Any]:
    return await _read(db, lambda s: Workflows(s).run(file, {}))  # type: ignore[no-any-return]


async def _rerun_from(pilot: Any, option: str) -> None:
    app = pilot.app
    await app.wait_loaded()
    await pilot.press("5")
    await until(pilot, lambda: isinstance(app.screen, WorkflowsScreen)
                and app.screen.detail is not None)
    await pilot.press("R")
    await until(pilot, lambda: isinstance(app.screen, ChoiceScreen))
    await pilot.press(option)
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    await pilot.press("y")


async def test_R_in_mode_5_reruns_a_run_from_a_step(tmp_path: Path) -> None:
    db = str(tmp_path / "store.db")
    assert (await _ran(db, _write(tmp_path, "three.lobster", THREE_STEPS)))["ok"]
    [run] = await _read(db, lambda s: Workflows(s).list())
    before = await _read(db, lambda s: Workflows(s).get(run["id"]))
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await _rerun_from(pilot, "2")  # build
        screen = app.screen
        assert isinstance(screen, WorkflowsScreen)
        await until(pilot, lambda: screen.selected not in (None, run["id"])
                    and screen.detail is not None and screen.detail["status"] == "ok",
                    timeout=30)
        new = screen.selected
        assert app.pending_rerun is None
        await until(pilot, lambda: any(n.message.startswith(
            f"{new}: rerun of {run['id']} from step build") for n in app._notifications))
    rerun = await _read(db, lambda s: Workflows(s).get(str(new)))
    assert rerun["rerun_of"] == {"run": run["id"], "from_step": "build", "by": "alice"}
    assert [s["reused"] for s in rerun["steps"]] == [True, False, False]
    assert rerun["output"] == ["shipped\n"]
    after = await _read(db, lambda s: Workflows(s).get(run["id"]))
    assert {k: after[k] for k in ("status", "steps", "output", "ended_at")} == \
        {k: before[k] for k in ("status", "steps", "output", "ended_at")}


async def test_R_in_mode_5_refused_by_core_writes_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "store.db")
    assert not (await _ran(db, _write(tmp_path, "broken.lobster", FAILS_FIRST)))["ok"]
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await _rerun_from(pilot, "2")  # build: fetch before it has no output
        await until(pilot, lambda: any("has no recorded output" in n.message
                                       for n in app._notifications))
        assert app.pending_rerun is None  # no later run is taken for this one's
    assert len(await _read(db, lambda s: Workflows(s).list())) == 1
