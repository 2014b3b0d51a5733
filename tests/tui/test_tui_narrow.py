"""The console at 80x24, the narrowest supported size (issue 39, trap 5), with the demo's
data: the Unblock dialog shows all its options, mode 7's node ids stay whole (siblings share
their prefix), the footer never cuts a key's label (it says more keys are under `?`), and
mode 5's step names are not cut."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from textual.widgets import Button
from textual.widgets._footer import FooterKey
from tui_helpers import copy_store, shown, until

from clawtower.core import open_store
from clawtower.core.demo.flows import seed_flows
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.modals import ChoiceScreen
from clawtower.tui.rowlist import RowList
from clawtower.tui.screens.flows import FlowsScreen, FlowTree
from clawtower.tui.screens.task_detail import TaskDetailScreen
from clawtower.tui.screens.workflows import WorkflowsScreen
from clawtower.tui.seed import seed_workflows

NARROW = (80, 24)
ROOT = Path(__file__).resolve().parents[2]
DEMO_AGENTS = ROOT / "examples" / "demo" / "agents.yaml"


def make_app(db: str) -> ClawtowerApp:
    return ClawtowerApp(db, run_engine=False, operator="alice")


async def test_the_unblock_dialog_shows_every_option(demo_db: str) -> None:
    app = make_app(demo_db)
    async with app.run_test(size=NARROW) as pilot:
        await app.wait_loaded()
        [tid] = [t for t, r in app.model.tasks.items() if r["phase"] == "circuit_open"]
        app.open_task(tid)
        await until(pilot, lambda: isinstance(app.screen, TaskDetailScreen))
        await pilot.press("u")
        await until(pilot, lambda: isinstance(app.screen, ChoiceScreen))
        await pilot.pause()
        dialog = app.screen.query_one("#dialog")
        options = list(app.screen.query(Button))
        assert [b.name for b in options] == ["retry", "revise", "abandon"]
        for b in options:  # inside the screen, and not clipped by the dialog
            assert app.screen.region.contains_region(b.region), (b.name, b.region)
            assert dialog.region.contains_region(b.region), (b.name, b.region, dialog.region)
            assert b.name in str(b.label)


@pytest.fixture(scope="module")
def flows_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("flows") / "store.db"

    async def go() -> None:
        store = await open_store(path)
        try:
            await seed_flows(store, DEMO_AGENTS, live=False)
        finally:
            await store.close()

    asyncio.run(go())
    return path


async def test_flow_node_ids_are_whole(flows_template: Path, tmp_path: Path) -> None:
    """Siblings `mig-users` and `mig-invoices` (and `q3-sales`, `q3-costs`) share their
    prefix: cut, they read the same. Every node's id shows whole."""
    app = make_app(copy_store(flows_template, tmp_path / "store.db"))
    async with app.run_test(size=NARROW) as pilot:
        await pilot.press("7")
        await until(pilot, lambda: isinstance(app.screen, FlowsScreen))
        screen = app.screen
        assert isinstance(screen, FlowsScreen)
        await until(pilot, lambda: len(screen.rows) == 13)
        tree = screen.query_one(FlowTree)
        await pilot.pause()
        text = "\n".join(tree.render_line(y).text for y in range(tree.size.height))
        for row in screen.rows:
            if row["kind"] == "task":
                assert re.search(rf"└ {re.escape(row['local_id'])}(\s|$)", text, re.M), (
                    row["local_id"], text)
            else:
                assert re.search(rf"^\s*{re.escape(row['id'])}\s", text, re.M), text


async def test_the_footer_never_cuts_a_key(demo_db: str) -> None:
    """In every mode each footer key shows whole, clear of the palette key; when some do not
    fit, `?` says there are more keys."""
    app = make_app(demo_db)
    async with app.run_test(size=NARROW) as pilot:
        await app.wait_loaded()
        for n in "12345678":
            await pilot.press(n)
            await pilot.pause(0.3)
            keys = [k for k in app.screen.query(FooterKey) if k.display]
            palette = next(k for k in keys if k.has_class("-command-palette"))
            shown_keys = [k for k in keys if k is not palette]
            for k in shown_keys:
                assert k.region.right <= palette.region.x, (n, k.key, k.region, palette.region)
                assert app.screen.region.contains_region(k.region), (n, k.key)
            wanted = {b.action for _, b, _, _ in app.screen.active_bindings.values()
                      if b.show and b.key != app.COMMAND_PALETTE_BINDING}
            listed = {k.action for k in shown_keys}
            more = next((k for k in shown_keys if k.action.endswith("toggle_help")), None)
            assert more is not None, n
            assert wanted <= listed or more.description == "More", (n, wanted - listed)


@pytest.fixture(scope="module")
def workflows_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wf") / "store.db"
    asyncio.run(seed_workflows(path))
    return path


async def test_workflow_step_names_are_whole(workflows_template: Path,
                                             tmp_path: Path) -> None:
    app = make_app(copy_store(workflows_template, tmp_path / "store.db"))
    async with app.run_test(size=NARROW) as pilot:
        await app.wait_loaded()
        await pilot.press("5")
        await until(pilot, lambda: isinstance(app.screen, WorkflowsScreen))
        screen = app.screen
        assert isinstance(screen, WorkflowsScreen)
        await until(pilot, lambda: bool(app.model.workflows))
        runs = list(app.model.workflows)
        assert len(runs) == 3
        for run in runs:
            screen.query_one("#wf-list", RowList).move_cursor_to_key(run["id"])
            steps = screen.query_one("#wf-steps")
            done = f"{run['steps_done']}/{run['steps_total']}"
            await until(pilot, lambda run=run, steps=steps, done=done:
                        done in str(steps.border_title) and screen.detail is not None
                        and screen.detail["id"] == run["id"])
            await pilot.pause()
            table = shown(steps, width=steps.content_region.width)
            detail = screen.detail
            assert detail is not None
            names = [s["id"] for s in detail["steps"]]
            assert names
            for name in names:
                assert re.search(rf"\d\s+{re.escape(name)}\s", table), (name, table)
