"""Mode 7, flows: each flow's DAG as a live tree (status, agent, duration, tokens), the
selected node's agent mailbox (`b` cycles inbox/outbox/archive), the node's session
transcript, a flow driven by another process showing up live, `x` cancelling a flow, and
the console's own flow engine driving the demo's live flow to its end."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from flow_helpers import GatedBrain, specs, sub
from tui_helpers import SIZE, copy_store, shown, until

from clawtower.core import open_store
from clawtower.core.demo.flows import seed_flows
from clawtower.core.flows.engine import FlowEngine
from clawtower.core.flows.service import Flows
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.screens.flows import FlowsScreen, FlowTree

ROOT = Path(__file__).resolve().parents[2]
DEMO_AGENTS = ROOT / "examples" / "demo" / "agents.yaml"


async def _seed(path: Path, live: bool) -> None:
    store = await open_store(path)
    try:
        await seed_flows(store, DEMO_AGENTS, live=live)
    finally:
        await store.close()


@pytest.fixture(scope="module")
def flows_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("flows") / "store.db"
    asyncio.run(_seed(path, live=False))
    return path


def make_app(db: str, **kw: Any) -> ClawtowerApp:
    kw.setdefault("run_engine", False)
    kw.setdefault("operator", "alice")
    return ClawtowerApp(db, **kw)


async def test_tree_mailbox_and_transcript(flows_template: Path, tmp_path: Path) -> None:
    db = copy_store(flows_template, tmp_path / "store.db")
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("7")
        await until(pilot, lambda: isinstance(app.screen, FlowsScreen))
        screen = app.screen
        assert isinstance(screen, FlowsScreen)
        await until(pilot, lambda: len(screen.rows) == 13)
        assert [(r["id"], r["status"]) for r in screen.rows[:7]] == [
            ("F-2", "failed"), ("F-2/mig-plan", "failed"), ("F-2/mig-plan/mig-tables", "failed"),
            ("F-2/mig-plan/mig-tables/mig-users", "done"),
            ("F-2/mig-plan/mig-tables/mig-invoices", "failed"),
            ("F-2/mig-plan/mig-notes", "cancelled"), ("F-1", "done")]
        key = "F-1/q3-brief/q3-figures"
        screen.query_one(FlowTree).move_cursor_to_key(key)
        await until(pilot, lambda: screen.detail is not None
                    and screen.detail["task"]["task_id"] == key)
        head = shown(screen.query_one("#flo-head"))
        assert "analyst" in head and "2 subtask(s), 0 open" in head
        assert "Q3: sales 4.2M (+12%)" in shown(screen.query_one("#flo-result"))
        transcript = shown(screen.query_one("#flo-transcript"))
        assert "TASK F-1/q3-brief/q3-figures" in transcript
        assert "Decomposed into 2 subtasks: q3-sales -> fetcher; q3-costs -> fetcher" in \
            transcript
        assert "(inbox empty)" in shown(screen.query_one("#flo-mailbox"))
        await pilot.press("b")
        await until(pilot, lambda: "REPLY" in shown(screen.query_one("#flo-mailbox")))
        outbox = shown(screen.query_one("#flo-mailbox"))
        assert outbox.count("TASK") == 2 and "planner" in outbox
        await pilot.press("b")
        await until(pilot, lambda: "archive" in str(
            screen.query_one("#flo-mailbox").border_title))
        archive = shown(screen.query_one("#flo-mailbox"))
        assert "REPLY" in archive and "fetcher" in archive and "Collect the Q3" in archive
        # the failed flow: its error, and the cancelled sibling
        screen.query_one(FlowTree).move_cursor_to_key("F-2")
        await until(pilot, lambda: screen.detail is not None
                    and screen.detail["is_flow"] and screen.detail["flow"]["id"] == "F-2")
        assert "lock timeout on invoices" in shown(screen.query_one("#flo-result"))


async def test_a_flow_run_elsewhere_shows_live_and_x_cancels(tmp_path: Path) -> None:
    db = str(tmp_path / "live.db")
    store = await open_store(db)
    try:
        await specs(store, {"A": ["B"], "B": []})
        app = make_app(db)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("7")
            screen = app.screen
            assert isinstance(screen, FlowsScreen)
            flows = Flows(store)
            gate = asyncio.Event()
            fid = await flows.start("A", "one job")
            engine = FlowEngine(store, GatedBrain({"root": [sub("b", "B")]},
                                                  gates={"b": gate}))
            driver = asyncio.create_task(engine.run_flow(fid))
            await until(pilot, lambda: any(r["id"] == f"{fid}/root/b" and r["status"] ==
                                           "running" for r in screen.rows), timeout=30)
            screen.query_one(FlowTree).move_cursor_to_key(fid)
            await until(pilot, lambda: screen.detail is not None
                        and screen.detail["flow"]["id"] == fid)
            await pilot.press("x")
            await until(pilot, lambda: any(r["id"] == fid and r["status"] == "cancelled"
                                           for r in screen.rows), timeout=30)
            gate.set()
            flow = await asyncio.wait_for(driver, 30)
            assert flow["status"] == "cancelled" and "alice" in flow["error"]
    finally:
        await store.close()


async def test_the_consoles_flow_engine_drives_the_live_demo_flow(tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    await _seed(Path(db), live=True)
    data = yaml.safe_load(DEMO_AGENTS.read_text())
    data["speed"] = 0.02  # the live flow's 9 s steps in a fraction of a second
    agents = tmp_path / "agents.yaml"
    agents.write_text(yaml.safe_dump(data))
    app = make_app(db, run_engine=True, agents_file=str(agents))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("7")
        screen = app.screen
        assert isinstance(screen, FlowsScreen)
        await until(pilot, lambda: any(r["id"] == "F-3" and r["status"] == "done"
                                       for r in screen.rows), timeout=60)
        f3 = [r for r in screen.rows if r["id"].startswith("F-3/")]
        assert len(f3) == 7 and all(r["status"] == "done" for r in f3)


async def test_x_on_a_finished_flow_says_why_it_does_nothing(flows_template: Path,
                                                            tmp_path: Path) -> None:
    db = copy_store(flows_template, tmp_path / "store.db")
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("7")
        await until(pilot, lambda: isinstance(app.screen, FlowsScreen))
        screen = app.screen
        assert isinstance(screen, FlowsScreen)
        await until(pilot, lambda: len(screen.rows) == 13)
        screen.query_one(FlowTree).move_cursor_to_key("F-1")
        await until(pilot, lambda: screen.detail is not None
                    and screen.detail["flow"]["id"] == "F-1")
        await pilot.press("x")
        await until(pilot, lambda: any(n.message == "F-1 is done: nothing to cancel"
                                       for n in app._notifications))
        assert next(r for r in screen.rows if r["id"] == "F-1")["status"] == "done"
