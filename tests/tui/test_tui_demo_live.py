"""`clawtower demo` keeps every mode alive: its console starts a meeting paced for a human
(mode 3) and a workflow that waits at its approval gate (modes 5 and 2), without leaving the
tasks mode the operator starts in."""

from __future__ import annotations

from pathlib import Path

from tui_helpers import SIZE, until

from clawtower.cli.demo import DEMO_DIR, DEMO_MEETING, live_acts
from clawtower.core import Approvals, load_script, open_store
from clawtower.core.meetings.consensus import Consensus, decide
from clawtower.core.meetings.stance import Stance
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.protocol import ConsoleApp
from clawtower.tui.screens.tasks import TasksScreen


def test_the_demo_meeting_is_paced_for_a_human() -> None:
    """Its script: no consensus before round 7, and at least half a minute to get there."""
    script = load_script(DEMO_DIR / "agents.yaml")
    names, _, max_rounds = DEMO_MEETING
    steps = {n: script.scripts[n]["meeting"] for n in names}
    seconds = 0.0
    for rnd in range(7):
        stances = [Stance(steps[n][min(rnd, len(steps[n]) - 1)].stance or "NEUTRAL")
                   for n in names]
        outcome = decide(stances).consensus
        assert (outcome is Consensus.NO) == (rnd < 6), (rnd + 1, outcome)
        seconds += max(float(steps[n][min(rnd, len(steps[n]) - 1)].delay_ms or 0)
                       for n in names) / 1000
    assert seconds >= 30, seconds
    assert max_rounds > 7  # room to grant, and to stop it before it ends


async def test_the_demo_console_starts_a_live_meeting_and_a_gated_workflow(
        tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    acts = live_acts(DEMO_DIR)

    def on_loaded(app: ConsoleApp) -> None:
        for act in acts:
            act(app)

    app = ClawtowerApp(db, run_engine=False, agents_file=str(DEMO_DIR / "agents.yaml"),
                       operator="alice", on_loaded=on_loaded)
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        # the console's views refresh one by one: the approvals list may follow the paused
        # run a moment later on a busy machine
        await until(pilot, lambda: any(m["status"] == "running" for m in app.model.meetings)
                    and any(r["status"] == "paused" for r in app.model.workflows)
                    and bool(app.model.approvals), timeout=30)
        [meeting] = app.model.meetings
        assert meeting["participants"] == DEMO_MEETING[0]
        [run] = app.model.workflows
        assert run["name"] == "release" and run["approval_id"]
        assert run["started_by"] == "demo"  # a later demo may replace what the demo made
        assert [a["id"] for a in app.model.approvals] == [run["approval_id"]]
        assert isinstance(app.screen, TasksScreen)  # the acts do not pull the operator away
        await pilot.pause(3.0)
        # paced: still running a few seconds in, so there is time to watch and steer it
        assert app.model.meeting(meeting["id"])["status"] == "running"  # type: ignore[index]
    store = await open_store(db)
    try:
        pending = await Approvals(store).pending()
        assert [a["kind"] for a in pending] == ["workflow_approval"]
    finally:
        await store.close()
