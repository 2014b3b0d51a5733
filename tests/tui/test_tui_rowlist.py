"""RowList: grouping, ordering, per-row updates, filtering, and its cost at 10,000 rows."""

from __future__ import annotations

import random
from typing import Any

from textual.app import App, ComposeResult

from clawtower.tui.views import TaskList


def task(num: int, phase: str = "executing", seq: int = 1, title: str | None = None
         ) -> dict[str, Any]:
    return {"id": f"T-{num}", "num": num, "title": title or f"Task number {num}", "phase": phase,
            "attempts": 1, "spec_ok": 1, "phase_reason": "because", "created_at": 1.8e9,
            "updated_at": 1.8e9 + num, "last_seq": seq}


class ListApp(App[None]):
    CSS = "TaskList { height: 1fr; }"

    def compose(self) -> ComposeResult:
        yield TaskList(id="tasks")

    def get_theme_variable_defaults(self) -> dict[str, str]:
        from clawtower.tui.themes import variable_defaults

        return variable_defaults(None)


def entries(tl: TaskList) -> list[str]:
    return [f"[{k}]" if kind == "g" else str(k) for kind, k in tl.lines]


async def test_groups_in_operator_order_rows_by_number() -> None:
    app = ListApp()
    async with app.run_test(size=(100, 20)) as pilot:
        tl = app.query_one(TaskList)
        tl.load([task(3, "completed"), task(1, "executing"), task(2, "awaiting_approval"),
                 task(4, "executing")])
        await pilot.pause()
        assert entries(tl) == ["[awaiting_approval]", "T-2", "[executing]", "T-1", "T-4",
                               "[completed]", "T-3"]
        assert tl.cursor_key == "T-2"  # the cursor starts on the first row, not a header


async def test_phase_change_moves_one_row_and_cursor_follows_it() -> None:
    app = ListApp()
    async with app.run_test(size=(100, 20)) as pilot:
        tl = app.query_one(TaskList)
        tl.load([task(1), task(2), task(3)])
        tl.move_cursor_to_key("T-2")
        tl.apply([task(2, "completed", seq=5)])
        await pilot.pause()
        assert entries(tl) == ["[executing]", "T-1", "T-3", "[completed]", "T-2"]
        assert tl.cursor_key == "T-2"


async def test_version_only_change_renders_only_that_row() -> None:
    app = ListApp()
    async with app.run_test(size=(100, 20)) as pilot:
        tl = app.query_one(TaskList)
        tl.load([task(n) for n in range(1, 11)])
        await pilot.pause()
        rendered: list[str] = []
        original = tl.row_cells

        def counting(key: Any, data: Any) -> Any:
            rendered.append(str(key))
            return original(key, data)

        tl.row_cells = counting  # type: ignore[method-assign]
        tl.apply([task(5, seq=2, title="Renamed")])
        tl.apply([task(6, seq=1)])  # same version: nothing to do
        await pilot.pause()
        assert rendered == ["T-5"]


async def test_filter_hides_rows_and_updates_keep_matching() -> None:
    app = ListApp()
    async with app.run_test(size=(100, 20)) as pilot:
        tl = app.query_one(TaskList)
        tl.load([task(1, title="alpha"), task(2, title="beta"), task(3, title="alphabet")])
        tl.set_filter("alpha")
        await pilot.pause()
        assert [k for kind, k in tl.lines if kind == "r"] == ["T-1", "T-3"]
        tl.apply([task(2, seq=2, title="alpha two")])
        assert [k for kind, k in tl.lines if kind == "r"] == ["T-1", "T-2", "T-3"]
        tl.set_filter("")
        assert tl.visible_count == 3


async def test_enter_on_a_group_collapses_it() -> None:
    app = ListApp()
    async with app.run_test(size=(100, 20)) as pilot:
        tl = app.query_one(TaskList)
        tl.load([task(1), task(2, "completed")])
        tl.focus()
        await pilot.press("home", "enter")
        assert entries(tl) == ["[executing]", "[completed]", "T-2"]
        await pilot.press("enter")
        assert entries(tl) == ["[executing]", "T-1", "[completed]", "T-2"]


async def test_ten_thousand_rows_load_update_and_paint() -> None:
    """10k rows: a 200-row batch updates exactly those rows; paint and cursor work at scale.

    How fast this is lives in benchmarks/bench_console_rows.py (beside a DataTable), not here.
    """
    phases = ["executing", "spec_review", "completed", "awaiting_approval", "failed"]
    rng = random.Random(1)
    rows = [task(n, rng.choice(phases)) for n in range(1, 10_001)]
    app = ListApp()
    async with app.run_test(size=(140, 40)) as pilot:
        tl = app.query_one(TaskList)
        tl.load(rows)
        await pilot.pause()
        assert tl.visible_count == 10_000

        # a 4 Hz batch: 200 rows changed, a quarter of them changing phase
        batch = []
        for i, n in enumerate(rng.sample(range(1, 10_001), 200)):
            phase = rng.choice(phases) if i % 4 == 0 else rows[n - 1]["phase"]
            batch.append(task(n, phase, seq=2))
        with app.batch_update():
            tl.apply(batch)
        await pilot.pause()
        assert tl.visible_count == 10_000
        expected = {r["id"]: r["phase"] for r in rows}
        expected.update({r["id"]: r["phase"] for r in batch})
        counts: dict[str, int] = {}
        for phase in expected.values():
            counts[phase] = counts.get(phase, 0) + 1
        headers = [e for e in entries(tl) if e.startswith("[")]
        assert sorted(headers) == sorted(f"[{p}]" for p in counts)
        group = None
        placed = {}
        for kind, key in tl.lines:
            if kind == "g":
                group = key
            else:
                placed[key] = group
        assert placed == expected  # every row sits under its (possibly new) phase

        tl._cache.clear()
        painted = [tl.render_line(y) for y in range(40)]
        widths = {strip.cell_length for strip in painted}
        assert len(widths) == 1 and widths.pop() >= tl.size.width - 2  # full rows (scrollbar aside)
        assert any("T-" in "".join(seg.text for seg in strip) for strip in painted)
        start = tl.cursor
        for _ in range(500):
            tl.action_cursor_down()
        await pilot.pause()
        assert tl.cursor == start + 500
