"""Workflow gate round trip, in process: resume a paused run with its token -> the run
continues -> the next gate is persisted (baselines.md workload 4, warm).

Ours (synchronous=NORMAL unless --sync FULL): a Lobster workflow of G approval gates in a
row (each gate a step of its own, as a workflow author writes it); one cycle is
`Workflows.resume(token=T, approve=True)` returning the next `needs_approval` envelope, whose
gate (approvals row, hashed single-use token, step results) is committed before it returns.
After G gates the run ends; a fresh run starts outside the timing.

Peer, interleaved cycle by cycle in the same process (only if `langgraph` and
`langgraph-checkpoint-sqlite` are importable, e.g. from .venv-bench; see
benchmarks/requirements-peers.txt): the one-node LangGraph graph of bench_approval.py looping
on `interrupt()` with SqliteSaver on a WAL connection with the same synchronous mode; one cycle
is `graph.invoke(Command(resume=...), durability="sync")` returning at the next interrupt.
Target: our p50 <= 0.5 x LangGraph's p50.

    .venv/bin/python benchmarks/bench_workflow_gate.py [--quick] [--cycles N] [--json PATH]
    .venv-bench/bin/python benchmarks/bench_workflow_gate.py     # with the LangGraph column
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import _common as cm
from bench_approval import langgraph_peer

from clawtower.core.store import SQLiteStore, open_store
from clawtower.core.workflows.service import Workflows

TARGET_RATIO = 0.5


def gate_workflow(path: Path, gates: int) -> Path:
    lines = ["name: gates", "steps:", "  - id: start", "    run: echo started"]
    for i in range(gates):
        lines += [f"  - id: gate{i}", "    approval:", f"      prompt: Gate {i}?"]
    path.write_text("\n".join(lines) + "\n")
    return path


class Ours:
    def __init__(self, path: Path, flow: Path, sync: str) -> None:
        self.path, self.flow, self.sync = path, flow, sync
        self.token: str | None = None

    async def setup(self) -> None:
        cm.remove_db(self.path)
        self.store: SQLiteStore = await open_store(self.path, synchronous=self.sync)
        self.wf = Workflows(self.store, actor="bench", stderr=lambda _t: None)

    async def _fresh(self) -> None:
        env = await self.wf.run(str(self.flow))
        assert env.get("status") == "needs_approval", env
        self.token = env["requiresApproval"]["resumeToken"]

    async def cycle(self) -> dict[str, float]:
        if self.token is None:
            await self._fresh()  # outside the timing
        t0 = time.perf_counter()
        env = await self.wf.resume(token=self.token, approve=True)
        dt = (time.perf_counter() - t0) * 1e3
        if env["status"] == "needs_approval":
            self.token = env["requiresApproval"]["resumeToken"]
            return {"ms": dt}
        assert env["status"] == "ok", env
        self.token = None
        return {"ms": dt, "last": 1.0}

    async def close(self) -> None:
        await self.store.close()


async def main() -> None:
    p = cm.parser(__doc__.splitlines()[0], reps=1)
    p.add_argument("--cycles", type=int, default=None, help="measured cycles (default 200)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up cycles (default 10)")
    p.add_argument("--gates", type=int, default=20, help="gates per workflow run (default 20)")
    p.add_argument("--sync", default="NORMAL", choices=["NORMAL", "FULL"])
    args = p.parse_args()
    cycles = args.cycles or (30 if args.quick else 200)
    warmup = args.warmup if args.warmup is not None else (3 if args.quick else 10)
    with cm.work_dir(args) as d:
        info = cm.machine_info(d)
        cm.print_machine(info)
        flow = gate_workflow(d / "gates.lobster", args.gates)
        ours = Ours(d / "workflow.db", flow, args.sync)
        await ours.setup()
        lg_cycle, lg_note = langgraph_peer(d / "langgraph.db", args.sync)
        print(f"{cycles} measured cycles after {warmup} warm-up; {args.gates} gates per run;"
              f" synchronous={args.sync}")
        print(lg_note)
        mine: list[float] = []
        ends: list[float] = []
        peer: list[float] = []
        try:
            for n in range(cycles + warmup):
                order = ["ours", "peer"] if n % 2 == 0 else ["peer", "ours"]
                for side in order:
                    if side == "ours":
                        res = await ours.cycle()
                        if n >= warmup:
                            (ends if "last" in res else mine).append(res["ms"])
                    elif lg_cycle is not None:
                        ms = lg_cycle()["visible_ms"]
                        if n >= warmup:
                            peer.append(ms)
        finally:
            await ours.close()

    def stats(xs: list[float]) -> list[str]:
        return [f"{cm.percentile(xs, 50):.2f}", f"{cm.percentile(xs, 90):.2f}",
                f"{min(xs):.2f}", f"{max(xs):.2f}"] if xs else ["-"] * 4

    table: list[list[Any]] = [
        ["clawtower: resume -> next gate persisted", len(mine), *stats(mine)],
        ["clawtower: resume of the last gate -> run ended", len(ends), *stats(ends)],
    ]
    if peer:
        table.append(["LangGraph: resume -> next interrupt saved", len(peer), *stats(peer)])
    cm.print_table(f"workflow gate round trip, ms (synchronous={args.sync}, warm)",
                   ["what", "cycles", "p50", "p90", "min", "max"], table)
    ratio = None
    if peer:
        ratio = cm.percentile(mine, 50) / cm.percentile(peer, 50)
        verdict = "met" if ratio <= TARGET_RATIO else "NOT met"
        print(f"\nclawtower p50 ÷ LangGraph p50 = {ratio:.2f} (target <= {TARGET_RATIO}:"
              f" {verdict}; interleaved, same run)")
    cm.write_json(args.json, {
        "benchmark": "workflow_gate", "machine": info, "synchronous": args.sync,
        "cycles": cycles, "warmup": warmup, "gates": args.gates,
        "ours_ms": mine, "run_end_ms": ends, "peer_ms": peer, "peer_note": lg_note,
        "ours_p50_ms": cm.percentile(mine, 50) if mine else None,
        "ours_p90_ms": cm.percentile(mine, 90) if mine else None,
        "peer_p50_ms": cm.percentile(peer, 50) if peer else None,
        "peer_p90_ms": cm.percentile(peer, 90) if peer else None,
        "ratio_p50_ours_vs_peer": ratio, "target_ratio": TARGET_RATIO,
    })


if __name__ == "__main__":
    asyncio.run(main())
