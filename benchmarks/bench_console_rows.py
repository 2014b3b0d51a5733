"""The console's task list at 10,000 rows: our Line-API TaskList beside Textual's DataTable.

Same rows, same 120x40 headless terminal, same work, interleaved in one run: load the
rows, apply a 4 Hz batch of 200 changed rows (a quarter of them changing phase), then paint
a whole screen from a cold cache. Reports medians and DataTable / TaskList ratios.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from _common import machine_info, median, parser, print_machine, print_table, reps_of, write_json
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from clawtower.tui.themes import variable_defaults
from clawtower.tui.views import TaskList

PHASES = ["executing", "spec_review", "completed", "awaiting_approval", "failed"]
COLS = ("id", "title", "phase", "attempts", "phase_reason")


def task(num: int, phase: str, seq: int = 1) -> dict[str, Any]:
    return {"id": f"T-{num}", "num": num, "title": f"Task number {num}", "phase": phase,
            "attempts": 1, "spec_ok": 1, "phase_reason": "because", "created_at": 1.8e9,
            "updated_at": 1.8e9 + num, "last_seq": seq}


class Bench(App[None]):
    CSS = "TaskList, DataTable { height: 1fr; }"

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def compose(self) -> ComposeResult:
        yield TaskList(id="w") if self.kind == "tasklist" else DataTable(id="w")

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return variable_defaults(None)


async def one(kind: str, n: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    rows = [task(i, rng.choice(PHASES)) for i in range(1, n + 1)]
    batch = []
    for i, k in enumerate(rng.sample(range(1, n + 1), 200)):
        batch.append(task(k, rng.choice(PHASES) if i % 4 == 0 else rows[k - 1]["phase"], 2))
    app = Bench(kind)
    async with app.run_test(size=(120, 40)) as pilot:
        w = app.query_one("#w")
        t0 = time.perf_counter()
        if isinstance(w, TaskList):
            w.load(rows)
        else:
            assert isinstance(w, DataTable)
            for c in COLS:
                w.add_column(c, key=c)
            w.add_rows([[str(r[c]) for c in COLS] for r in rows])
            keys = [rk for rk in w.rows]
        load = time.perf_counter() - t0
        await pilot.pause()
        t0 = time.perf_counter()
        with app.batch_update():
            if isinstance(w, TaskList):
                w.apply(batch)
            else:
                for r in batch:
                    w.update_cell(keys[r["num"] - 1], "phase", r["phase"])
        update = time.perf_counter() - t0
        t0 = time.perf_counter()
        if isinstance(w, TaskList):
            w._cache.clear()
        for y in range(38):
            w.render_line(y)
        paint = time.perf_counter() - t0
    return {"load": load, "update": update, "paint": paint}


async def main_async() -> None:
    p = parser(__doc__ or "", reps=5)
    p.add_argument("--rows", type=int, default=10_000)
    args = p.parse_args()
    reps = reps_of(args)
    n = 1_000 if args.quick else args.rows
    info = machine_info()
    print_machine(info)
    results: dict[str, list[dict[str, float]]] = {"tasklist": [], "datatable": []}
    for rep in range(reps):
        order = ["tasklist", "datatable"] if rep % 2 == 0 else ["datatable", "tasklist"]
        for kind in order:
            results[kind].append(await one(kind, n, seed=rep))
    rows = []
    out: dict[str, Any] = {"machine": info, "rows": n, "reps": reps}
    for metric in ("load", "update", "paint"):
        ours = median([r[metric] for r in results["tasklist"]]) * 1000
        dt = median([r[metric] for r in results["datatable"]]) * 1000
        rows.append([metric, f"{ours:.1f}", f"{dt:.1f}", f"{dt / ours:.1f}x" if ours else "-"])
        out[metric] = {"tasklist_ms": ours, "datatable_ms": dt}
    print_table(f"{n:,} rows, 120x40, median of {reps} (ms)",
                ["step", "TaskList", "DataTable", "DataTable / TaskList"], rows)
    write_json(args.json, out)


if __name__ == "__main__":
    asyncio.run(main_async())
