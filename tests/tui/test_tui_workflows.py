"""Mode 5 and workflow gates in mode 2: runs listed with live steps, an approval gate
approved from the console (the run continues here), an input gate answered with JSON that is
checked against its schema before it is sent, a paused run cancelled, `:workflow FILE`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Static, TextArea
from tui_helpers import SIZE, shown, until

from clawtower.core import open_store
from clawtower.core.workflows.service import Workflows
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.modals import ConfirmScreen, JsonAnswerScreen
from clawtower.tui.screens.workflows import WorkflowsScreen
from clawtower.tui.seed import seed_workflows
from clawtower.tui.views import ApprovalList, WorkflowList

ROOT = Path(__file__).resolve().parents[2]

APPROVE_FLOW = """\
name: ship
steps:
  - id: plan
    run: "echo '{\\"files\\": 2}'"
  - id: gate
    approval:
      prompt: Ship the 2 files?
      items: [a.txt, b.txt]
  - id: ship
    run: echo shipped
    when: $gate.approved
"""

INPUT_FLOW = """\
name: review
steps:
  - id: draft
    run: echo draft
  - id: review
    input:
      prompt: Title for the release?
      responseSchema:
        type: object
        required: [title]
        properties:
          title: {type: string}
  - id: publish
    run: echo "published $review.response.title"
"""


def make_app(db: str) -> ClawtowerApp:
    return ClawtowerApp(db, run_engine=False, operator="alice")


def paused(db: str, tmp_path: Path, text: str, name: str) -> dict[str, Any]:
    """Start a run in another process, as `clawtower workflow run` would, paused at a gate."""
    flow = tmp_path / name
    flow.write_text(text)
    out = subprocess.run([sys.executable, "-m", "clawtower.cli.main", "--db", db, "workflow", "run",
                          "--file", str(flow)], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    envelope = json.loads(out.stdout)
    assert envelope["ok"], out.stdout + out.stderr
    return envelope


async def run_state(db: str) -> dict[str, Any]:
    store = await open_store(db)
    try:
        [run] = await Workflows(store).list()
        return await Workflows(store).get(run["id"])
    finally:
        await store.close()


async def test_an_approval_gate_is_approved_from_the_console_and_the_run_continues(
        tmp_path: Path) -> None:
    db = str(tmp_path / "store.db")
    envelope = paused(db, tmp_path, APPROVE_FLOW, "ship.lobster")
    assert envelope["status"] == "needs_approval"
    gate_id = envelope["requiresApproval"]["approvalId"]
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("2")
        await until(pilot, lambda: gate_id in app.screen.query_one(ApprovalList))
        body = shown(app.screen.query_one("#approval-body", Static))
        assert "Ship the 2 files?" in body and "a.txt" in body
        assert "the run continues" in body
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: gate_id not in app.model.approvals and
                    bool(app.model.workflows) and app.model.workflows[0]["status"] == "ok",
                    timeout=30)
        await pilot.press("5")
        await until(pilot, lambda: isinstance(app.screen, WorkflowsScreen)
                    and app.screen.detail is not None
                    and app.screen.detail["status"] == "ok")
        steps = shown(app.screen.query_one("#wf-steps", Static))
        assert "ship" in steps and "done" in steps
    run = await run_state(db)
    assert [s["status"] for s in run["steps"]] == ["done", "done", "done"]
    assert run["output"] == ["shipped\n"]
    assert run["steps"][1]["result"]["approvedBy"] == "alice"


async def test_an_input_gate_refuses_bad_json_and_schema_violations_before_sending(
        tmp_path: Path) -> None:
    db = str(tmp_path / "store.db")
    envelope = paused(db, tmp_path, INPUT_FLOW, "review.lobster")
    assert envelope["status"] == "needs_input"
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("2")
        await until(pilot, lambda: len(app.model.approvals) == 1)
        gate_id = app.model.approvals[0]["id"]
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, JsonAnswerScreen))
        modal = app.screen
        assert isinstance(modal, JsonAnswerScreen)
        area = modal.query_one(TextArea)
        error = modal.query_one("#answer-error", Static)
        area.text = "{not json"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert "not JSON" in shown(error)
        area.text = '{"headline": "x"}'
        await pilot.press("ctrl+s")
        await pilot.pause()
        # the runner's own (Lobster's) wording, and nothing was sent
        assert "must have required property 'title'" in shown(error)
        assert isinstance(app.screen, JsonAnswerScreen)
        assert app.model.approval(gate_id) is not None
        area.text = '{"title": "v2"}'
        await pilot.press("ctrl+s")
        await until(pilot, lambda: bool(app.model.workflows)
                    and app.model.workflows[0]["status"] == "ok", timeout=30)
    run = await run_state(db)
    assert run["steps"][1]["result"]["response"] == {"title": "v2"}
    assert run["output"] == ["published v2\n"]


async def in_mode_5(pilot: Pilot[Any]) -> None:
    """The console loaded, mode 5 shown with its first run's detail."""
    app = pilot.app
    assert isinstance(app, ClawtowerApp)
    await app.wait_loaded()
    await pilot.press("5")
    await until(pilot, lambda: isinstance(app.screen, WorkflowsScreen)
                and app.screen.detail is not None)


async def test_mode_5_lists_runs_and_cancels_a_paused_one(tmp_path: Path) -> None:
    db = str(tmp_path / "store.db")
    paused(db, tmp_path, APPROVE_FLOW, "ship.lobster")
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await in_mode_5(pilot)
        lst = app.screen.query_one(WorkflowList)
        assert len(app.model.workflows) == 1
        run_id = app.model.workflows[0]["id"]
        assert run_id in lst
        gate = shown(app.screen.query_one("#wf-gate", Static))
        assert "Ship the 2 files?" in gate and "a.txt" in gate
        steps = shown(app.screen.query_one("#wf-steps", Static))
        assert "waiting" in steps and "pending" in steps
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: app.model.workflows[0]["status"] == "cancelled"
                    and not app.model.approvals, timeout=10)
    run = await run_state(db)
    assert run["status"] == "cancelled"


async def test_a_paused_run_reads_the_same_in_the_list_and_the_detail(tmp_path: Path) -> None:
    db = str(tmp_path / "store.db")
    paused(db, tmp_path, APPROVE_FLOW, "ship.lobster")
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await in_mode_5(pilot)
        run = app.model.workflows[0]
        cells = " ".join(str(c) for c in app.screen.query_one(WorkflowList).row_cells(
            run["id"], run))
        head = shown(app.screen.query_one("#wf-head", Static))
        assert "waiting approval" in cells
        assert "waiting approval" in head and "paused" not in head, head


async def running_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pid_start: str) -> str:
    """A store with one run recorded as started (and never finished) by the process of this
    host named by `pid_start` ("PID:START"); the store's path."""
    import socket

    from clawtower.core.workflows import service
    from clawtower.core.workflows.load import load_workflow

    flow = tmp_path / "stuck.lobster"
    flow.write_text("steps:\n  - id: a\n    run: sleep 60\n")
    db = str(tmp_path / "store.db")
    store = await open_store(db)
    try:
        monkeypatch.setattr(service, "process_tag",
                            lambda: f"{socket.gethostname()}:{pid_start}")
        wf = Workflows(store)
        await store.execute(lambda tx: wf._start(tx, flow, load_workflow(flow), {}))
    finally:
        await store.close()
    return db


async def test_an_orphaned_run_is_shown_as_such_and_can_be_cancelled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a run started by a process that is gone (pid 999999999 never exists)
    db = await running_run(tmp_path, monkeypatch, "999999999:1")
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await in_mode_5(pilot)
        assert app.model.workflows[0]["driver"] == "gone"
        assert "orphaned" in " ".join(
            str(c) for c in app.screen.query_one(WorkflowList).row_cells(
                "W-1", app.model.workflows[0]))
        head = shown(app.screen.query_one("#wf-head", Static))
        assert "the process driving it is gone" in head
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: app.model.workflows[0]["status"] == "cancelled", timeout=10)
    assert (await run_state(db))["status"] == "cancelled"


async def test_a_run_becomes_orphaned_in_the_console_when_its_process_dies(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    driver = subprocess.Popen(["sleep", "60"])  # stands in for the process driving the run
    try:
        db = await running_run(tmp_path, monkeypatch, f"{driver.pid}:")
        app = make_app(db)
        async with app.run_test(size=SIZE) as pilot:
            await in_mode_5(pilot)
            assert app.model.workflows[0]["driver"] == "alive"
            driver.kill()
            driver.wait()
            # no event is written when a process dies: the console notices on its own
            await until(pilot, lambda: app.model.workflows[0]["driver"] == "gone", timeout=15)
            await until(pilot, lambda: "the process driving it is gone" in shown(
                app.screen.query_one("#wf-head", Static)))
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


async def test_a_workflow_started_from_the_command_line_runs_in_the_console(
        tmp_path: Path) -> None:
    db = str(tmp_path / "store.db")
    flow = tmp_path / "hello.lobster"
    flow.write_text("args:\n  who: {default: world}\nsteps:\n"
                    "  - id: hi\n    run: echo hello ${who}\n")
    store = await open_store(db)
    await store.close()
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("colon")
        await pilot.pause()
        await pilot.press(*f'workflow {flow} {{"who":"team"}}')
        await pilot.press("enter")
        await until(pilot, lambda: bool(app.model.workflows)
                    and app.model.workflows[0]["status"] == "ok", timeout=30)
        await until(pilot, lambda: app.current_mode == "workflows")
        await asyncio.sleep(0)
    run = await run_state(db)
    assert run["output"] == ["hello team\n"]
    assert run["started_by"] == "alice"


@pytest.fixture(scope="session")
def workflows_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("workflows") / "store.db"
    asyncio.run(seed_workflows(path))
    return path


def test_workflows_mode_snapshot(snap_compare: Any, workflows_template: Path,
                                 tmp_path: Path) -> None:
    from tui_helpers import copy_store

    db = copy_store(workflows_template, tmp_path / "store.db")

    async def loaded(pilot: Pilot[Any]) -> None:
        await in_mode_5(pilot)
        await pilot.pause()

    assert snap_compare(make_app(db), terminal_size=SIZE, run_before=loaded)


async def test_quitting_with_a_run_in_flight_hands_it_over_at_its_next_step(
        tmp_path: Path) -> None:
    """The step under way finishes; the next is left, unstarted, for any engine (here the
    one started afterwards): nothing is recorded failed."""
    db = str(tmp_path / "store.db")
    flow = tmp_path / "slow.lobster"
    out = tmp_path / "out.txt"
    hold = tmp_path / "hold"  # the first step runs until the test lets it end (not a sleep:
    hold.touch()              # beside another suite a 1 s step ended before it was seen)
    flow.write_text(f"steps:\n  - id: wait\n    run: while [ -f {hold} ]; do sleep 0.02; done;"
                    f" echo waited >> {out}\n"
                    f"  - id: next\n    run: echo next >> {out}\n")
    store = await open_store(db)
    await store.close()
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        app.start_workflow(str(flow))
        await until(pilot, lambda: bool(app.model.workflows)
                    and app.model.workflows[0]["status"] == "running", timeout=30)
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "1 workflow run(s) are running in this console" in shown(
            app.screen.query_one("#dialog-body", Static))
        await pilot.press("y")
        hold.unlink()  # the step under way ends; the run stops before the next one
        await until(pilot, lambda: not app.is_running, timeout=30)
    run = await run_state(db)
    assert run["status"] == "running" and run["error"] is None
    assert out.read_text().split() == ["waited"]
    store = await open_store(db)
    try:
        envelope = await Workflows(store, cwd=str(tmp_path)).adopt(run["id"])
    finally:
        await store.close()
    assert envelope["status"] == "ok"
    assert out.read_text().split() == ["waited", "next"]


INTERRUPTIBLE = """\
steps:
  - id: a
    run: touch in-a; while [ -f hold-a ]; do sleep 0.02; done; echo a >> out.txt
  - id: b
    run: echo b >> out.txt
"""


@pytest.mark.parametrize(("key", "lines"), [("t", ["a", "b"]), ("k", ["b"])],
                         ids=["retry", "skip"])
async def test_a_step_left_interrupted_by_a_dead_driver_is_retried_or_skipped(
        tmp_path: Path, key: str, lines: list[str]) -> None:
    from tests.test_workflows_adoption import Dir

    d = Dir(tmp_path, INTERRUPTIBLE)
    await asyncio.to_thread(d.kill_inside, "a", "workflow", "run", str(d.flow))
    _code, env, err = await asyncio.to_thread(d.cli, "workflow", "recover", "W-1")
    assert env["status"] == "needs_operator", (env, err)
    app = make_app(str(d.db))
    async with app.run_test(size=SIZE) as pilot:
        await in_mode_5(pilot)
        run = app.model.workflows[0]
        assert (run["status"], run["gate_kind"]) == ("paused", "interrupted")
        await pilot.press("a")  # not a gate an approval can decide: it says what can
        await until(pilot, lambda: any("t retries it, k skips it" in n.message
                                       for n in app._notifications))
        await pilot.press(key)
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: app.model.workflows[0]["status"] == "ok", timeout=30)
    assert d.lines() == lines
    assert await asyncio.to_thread(_recovered, d.db) == [
        ("a", "retry" if key == "t" else "skip", "alice")]


def _recovered(db: Path) -> list[tuple[str, str, str]]:
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [(p["step_id"], p["decision"], p["by"]) for p in (
            json.loads(r[0]) for r in conn.execute(
                "SELECT payload FROM events WHERE type='workflow.recovered' ORDER BY seq"))]
    finally:
        conn.close()
