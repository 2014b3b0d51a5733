"""Tokens and cost in the console: the task detail's usage section and the meeting's tokens."""

from __future__ import annotations

from typing import Any

from tui_helpers import SIZE, until

from clawtower.core import open_store
from clawtower.core.agents.provider import Usage
from clawtower.core.agents.usage import Price, UsageRecorder
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.render import usage_line
from clawtower.tui.rowlist import RowList
from clawtower.tui.screens.task_detail import TaskDetailScreen


async def record(db: str, subject: str, agent: str, price: Price | None, n: int = 2) -> None:
    store = await open_store(db)
    try:
        rec = UsageRecorder(store, subject, agent, price)
        for _ in range(n):
            await rec.record("gpt-x", "turn", Usage(prompt_tokens=1000, completion_tokens=500))
    finally:
        await store.close()


def test_usage_line_sums_rows_and_shows_cost_only_when_priced() -> None:
    rows: list[dict[str, Any]] = [
        {"agent": "a", "model": "m", "calls": 2, "prompt_tokens": 1000,
         "completion_tokens": 200, "cost_usd": 0.0},
        {"agent": "b", "model": "m", "calls": 1, "prompt_tokens": 500,
         "completion_tokens": 34, "cost_usd": 0.0},
    ]
    assert usage_line(rows) == "3 calls · 1,734 tok (1,500 in / 234 out)"
    rows[1]["cost_usd"] = 0.0125
    assert usage_line(rows).endswith(" · $0.0125")
    assert usage_line([]) == "no model calls"


async def test_task_detail_shows_tokens_and_cost(release_db: str) -> None:
    await record(release_db, "T-1", "builder", Price(prompt_per_mtok=3, completion_per_mtok=15))
    app = ClawtowerApp(release_db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        tasks = app.screen.query_one("#tasks", RowList)
        assert tasks.move_cursor_to_key("T-1")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, TaskDetailScreen)
                    and app.screen.detail is not None)
        await pilot.pause()
        section = app.screen.query_one("#sec-usage")
        assert section.display
        # the simulated lifecycle's 4 unpriced calls, plus our 2 priced ones:
        # 2 x (1000 x $3 + 500 x $15) per million tokens = $0.021
        title = str(section.border_title)
        assert title.startswith("Agent usage · 6 calls · ") and title.endswith(" · $0.0210")
        detail = app.screen.detail
        assert detail is not None
        costs = {(u["agent"], u["model"]): round(u["cost_usd"], 4) for u in detail["usage"]}
        assert costs[("builder", "gpt-x")] == 0.021


async def test_meeting_detail_totals_its_usage(release_db: str) -> None:
    from clawtower.core import AgentSet, MeetingConfig
    from clawtower.core.agents.simulator import SimScript
    from clawtower.core.meetings.coordinator import Coordinator
    from clawtower.tui.screens.meetings import MeetingsScreen

    store = await open_store(release_db)
    try:
        await Coordinator(store, AgentSet.simulated(SimScript(speed=0))).run(
            MeetingConfig(topic="Ship it?", participants=["ada", "ben", "cyd"], max_rounds=2),
            meeting_id="mtg-u")
        rows = await store.fetchall("SELECT * FROM usage WHERE subject='mtg-u'")
    finally:
        await store.close()
    app = ClawtowerApp(release_db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("3")
        screen = app.screen
        assert isinstance(screen, MeetingsScreen)
        await until(pilot, lambda: screen.detail is not None and screen.detail["id"] == "mtg-u")
        await pilot.pause()
        title = str(screen.query_one("#mtg-tokens").border_title)
        assert title == f"Tokens per round · {usage_line(rows)}"
        assert title.startswith("Tokens per round · ") and " calls · " in title
