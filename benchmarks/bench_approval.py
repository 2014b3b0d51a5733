"""Approval round trip: approve -> the task ready to resume (its phase moves in the decision's
commit) -> visible to a reader.

Ours (synchronous=NORMAL unless --sync FULL): N tasks (one planned side effect each) are
driven to awaiting_approval with the simulator at speed 0, then `Orchestrator.run` is
started in-process: event-driven, it waits in `store.wait_for_change`. One cycle:

  t0   `Approvals.approve(id)` is called (the decision, and the task's move to
       ready_to_resume, committed by the writer task in one command)
  ack  approve() returned
  vis  a reader (the store's read connection, woken by `store.wait_for_change`) sees the
       task in ready_to_resume or a later phase (the orchestrator moves on at once to
       perform the effect and complete; "or next" phase counts)

Before each cycle the previous task is left to finish (completed) and the loop to settle,
so every approval lands on an idle engine. The first cycles are a warm-up and not counted.
Reported: p50/p90 of ack and of vis, in ms; also "written", when the batch that wrote the
ready_to_resume transition began (its stored timestamp; a lower bound of its commit). Since
issue 36 that is the decision's own commit (the task's phase follows the decision in it, by
the orchestrator's rule); before, it was the orchestrator's next write.
Target: vis p50 <= 2 ms.

Peer, interleaved cycle by cycle in the same process (only if `langgraph` and
`langgraph-checkpoint-sqlite` are importable, e.g. from .venv-bench; see
benchmarks/requirements-peers.txt): a one-node LangGraph graph looping on `interrupt()`
with SqliteSaver on a WAL connection with the same synchronous mode; one cycle is
`graph.invoke(Command(resume=...), durability="sync")` returning at the next interrupt,
whose checkpoint is then saved (baselines.md workload 4, warm).

    .venv/bin/python benchmarks/bench_approval.py [--quick] [--cycles N] [--json PATH]
    .venv-bench/bin/python benchmarks/bench_approval.py      # with the LangGraph column
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as cm

from clawtower.core.agents.registry import AgentSet
from clawtower.core.agents.simulator import DEFAULT_AGENTS, SimScript
from clawtower.core.approvals import Approvals
from clawtower.core.orchestrator import Orchestrator
from clawtower.core.store import SQLiteStore, open_store
from clawtower.core.tasks.service import Tasks
from clawtower.core.tasks.spec import PlannedEffect, TaskSpec

TARGET_P50_MS = 2.0
RESUMED = ("ready_to_resume", "completed")


def spec(i: int) -> TaskSpec:
    return TaskSpec(
        title=f"Release {i}", goal="Publish the release notes.", outputs=["docs/notes.md"],
        acceptance_criteria=["Every merged pull request appears under one heading"],
        side_effects=[PlannedEffect(kind="notify", description=f"Announce release {i}",
                                    target="chat://customers")])


# --------------------------------------------------------------------------- ours


def observe(path: str) -> None:
    """The reader, in its own process: for each task id read from stdin, answer "ready",
    poll the task's phase on its own read-only connection every ~0.1 ms, and print the
    CLOCK_MONOTONIC time (time.perf_counter, comparable across processes on Linux) at
    which it first reads ready_to_resume or a later phase."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    for line in sys.stdin:
        task_id = line.strip()
        if not task_id:
            break
        print("ready", flush=True)
        deadline = time.perf_counter() + 30
        while True:
            row = conn.execute("SELECT phase FROM tasks WHERE id=?", (task_id,)).fetchone()
            if row and row[0] in RESUMED:
                seen = time.perf_counter()
                break
            if time.perf_counter() > deadline:
                seen = float("nan")
                break
            time.sleep(0.00005)
        print(f"{seen:.9f}", flush=True)


class Ours:
    def __init__(self, path: Path, n: int, sync: str) -> None:
        self.path, self.n, self.sync = path, n, sync
        self.stop = asyncio.Event()

    async def setup(self) -> None:
        cm.remove_db(self.path)
        self.store: SQLiteStore = await open_store(self.path, synchronous=self.sync)
        script = SimScript(seed=1, speed=0.0, agents=dict(DEFAULT_AGENTS))
        self.orch = Orchestrator(self.store, AgentSet.simulated(script))
        tasks = Tasks(self.store)
        for i in range(self.n):
            await tasks.create(spec(i))
        if not await self.orch.run_until_idle(600):
            raise RuntimeError("could not bring the tasks to awaiting_approval")
        self.approvals = Approvals(self.store)
        self.pending = await self.approvals.pending()
        if len(self.pending) != self.n:
            raise RuntimeError(f"{len(self.pending)} approvals pending, expected {self.n}")
        self.observer = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--observe", str(self.path.resolve()),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        # a second store on the same file: its writes reach the engine only through
        # polling, exactly like an approval made by another process (CLI, console)
        self.other = await open_store(self.path, synchronous=self.sync)
        self.runner = asyncio.create_task(self.orch.run(self.stop))

    async def _ask(self, line: str) -> str:
        proc = self.observer
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(line.encode() + b"\n")
        await proc.stdin.drain()
        return (await proc.stdout.readline()).decode().strip()

    async def wait_completed(self, task_id: str, seq: int) -> None:
        while True:
            row = await self.store.fetchone("SELECT phase FROM tasks WHERE id=?", (task_id,))
            if row and row["phase"] == "completed":
                return
            seq = await self.store.wait_for_change(seq, 5.0)

    async def cycle(self, i: int, remote: bool = False) -> dict[str, float]:
        a = self.pending[i]
        tid = a["subject"]
        seq = await self.store.last_seq()
        assert await self._ask(tid) == "ready"
        assert self.observer.stdout is not None
        answer = asyncio.ensure_future(self.observer.stdout.readline())
        await asyncio.sleep(0.003)  # let the engine settle into its wait
        approvals = Approvals(self.other) if remote else self.approvals
        w0 = time.time()
        t0 = time.perf_counter()
        await approvals.approve(a["id"], by="bench-operator")
        t_ack = time.perf_counter()
        t_vis = float((await answer).decode())
        await self.wait_completed(tid, seq)  # outside the timing
        row = await self.store.fetchone(
            "SELECT at FROM phase_history WHERE task_id=? AND to_phase='ready_to_resume'",
            (tid,))
        return {"ack_ms": (t_ack - t0) * 1e3, "visible_ms": (t_vis - t0) * 1e3,
                "written_ms": (float(row["at"]) - w0) * 1e3 if row else float("nan")}

    async def close(self) -> None:
        self.stop.set()
        await self.runner
        if self.observer.stdin is not None:
            self.observer.stdin.close()
        await self.observer.wait()
        await self.other.close()
        await self.store.close()


# --------------------------------------------------------------------------- LangGraph


def langgraph_peer(path: Path, sync: str) -> tuple[Callable[[], dict[str, float]] | None, str]:
    """A cycle function for LangGraph, or None and the reason it is skipped."""
    try:
        import langgraph
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import START, StateGraph
        from langgraph.types import Command, interrupt
    except ImportError as exc:
        return None, (f"LangGraph column skipped: {exc.name or exc} is not installed here"
                      " (install benchmarks/requirements-peers.txt into a side venv)")
    from typing import TypedDict

    class State(TypedDict):
        n: int

    def gate(state: State) -> dict[str, int]:
        interrupt({"approve": state["n"]})
        return {"n": state["n"] + 1}

    builder = StateGraph(State)
    builder.add_node("gate", gate)
    builder.add_edge(START, "gate")
    builder.add_edge("gate", "gate")
    cm.remove_db(path)
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={sync}")
    graph = builder.compile(checkpointer=SqliteSaver(conn))
    config: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": 10_000}
    out = graph.invoke({"n": 0}, config, durability="sync")
    assert "__interrupt__" in out

    def cycle() -> dict[str, float]:
        t0 = time.perf_counter()
        res = graph.invoke(Command(resume="approved"), config, durability="sync")
        dt = (time.perf_counter() - t0) * 1e3
        assert "__interrupt__" in res, res
        return {"visible_ms": dt}

    version = getattr(langgraph, "__version__", None)
    if version is None:
        from importlib.metadata import version as _v

        version = _v("langgraph")
    return cycle, f"LangGraph {version} with SqliteSaver (synchronous={sync})"


# --------------------------------------------------------------------------- main


async def main() -> None:
    p = cm.parser(__doc__.splitlines()[0], reps=1)
    p.add_argument("--observe", metavar="DB", help=argparse.SUPPRESS)
    p.add_argument("--cycles", type=int, default=None, help="measured cycles (default 200)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up cycles (default 10)")
    p.add_argument("--cross", type=int, default=None,
                   help="extra cycles approved from a second store on the same file, i.e."
                        " as another process would (default 40; 0 to skip)")
    p.add_argument("--sync", default="NORMAL", choices=["NORMAL", "FULL"])
    args = p.parse_args()
    cycles = args.cycles or (30 if args.quick else 200)
    warmup = args.warmup if args.warmup is not None else (3 if args.quick else 10)
    cross = args.cross if args.cross is not None else (6 if args.quick else 40)
    total = cycles + warmup
    # the schedule: local cycles in order, cross-process ones spread evenly among them
    schedule: list[tuple[int, bool]] = [(i, False) for i in range(total)]
    for k in range(cross):
        at = warmup + 1 + (k * cycles) // max(1, cross) + k
        schedule.insert(min(at, len(schedule)), (total + k, True))
    with cm.work_dir(args) as d:
        info = cm.machine_info(d)
        cm.print_machine(info)
        ours = Ours(d / "approval.db", total + cross, args.sync)
        t = time.perf_counter()
        await ours.setup()
        print(f"setup: {total + cross} tasks brought to awaiting_approval in"
              f" {time.perf_counter() - t:.1f} s; {cycles} measured cycles after {warmup}"
              f" warm-up (+{cross} approved from another store), synchronous={args.sync}")
        lg_cycle, lg_note = langgraph_peer(d / "langgraph.db", args.sync)
        print(lg_note)
        mine: list[dict[str, float]] = []
        remote: list[dict[str, float]] = []
        peer: list[dict[str, float]] = []
        try:
            for n, (i, is_remote) in enumerate(schedule):
                if is_remote:
                    remote.append(await ours.cycle(i, remote=True))
                    continue
                order = ["ours", "peer"] if n % 2 == 0 else ["peer", "ours"]
                for side in order:
                    if side == "ours":
                        res = await ours.cycle(i)
                        if i >= warmup:
                            mine.append(res)
                    elif lg_cycle is not None:
                        res = lg_cycle()
                        if i >= warmup:
                            peer.append(res)
        finally:
            await ours.close()

    def col(rows: list[dict[str, float]], key: str) -> list[float]:
        return [r[key] for r in rows]

    def stats(xs: list[float]) -> list[str]:
        return [f"{cm.percentile(xs, 50):.2f}", f"{cm.percentile(xs, 90):.2f}",
                f"{min(xs):.2f}", f"{max(xs):.2f}"] if xs else ["-"] * 4

    table = [
        ["clawtower: approve() acknowledged", len(mine), *stats(col(mine, "ack_ms"))],
        ["clawtower: ready_to_resume's write began", len(mine), *stats(col(mine, "written_ms"))],
        ["clawtower: ready_to_resume visible", len(mine), *stats(col(mine, "visible_ms"))],
    ]
    if peer:
        table.append(["LangGraph: resume -> next interrupt saved", len(peer),
                      *stats(col(peer, "visible_ms"))])
    if remote:
        table.append(["clawtower, approved by another process: visible", len(remote),
                      *stats(col(remote, "visible_ms"))])
    cm.print_table(f"approval round trip, ms (synchronous={args.sync}, warm)",
                   ["what", "cycles", "p50", "p90", "min", "max"], table)
    p50 = cm.percentile(col(mine, "visible_ms"), 50)
    p90 = cm.percentile(col(mine, "visible_ms"), 90)
    print(f"\ntarget p50 <= {TARGET_P50_MS} ms: {'met' if p50 <= TARGET_P50_MS else 'NOT met'}"
          f" (p50 {p50:.2f} ms, p90 {p90:.2f} ms)")
    ratio = None
    if peer:
        ratio = p50 / cm.percentile(col(peer, "visible_ms"), 50)
        print(f"clawtower p50 ÷ LangGraph p50 = {ratio:.2f} (interleaved, same run)")
    cm.write_json(args.json, {
        "benchmark": "approval", "machine": info, "synchronous": args.sync,
        "cycles": cycles, "warmup": warmup, "target_p50_ms": TARGET_P50_MS,
        "ours": mine, "peer": peer, "peer_note": lg_note, "cross_process": remote,
        "ours_p50_ms": p50, "ours_p90_ms": p90,
        "peer_p50_ms": cm.percentile(col(peer, "visible_ms"), 50) if peer else None,
        "peer_p90_ms": cm.percentile(col(peer, "visible_ms"), 90) if peer else None,
        "cross_process_p50_ms": cm.percentile(col(remote, "visible_ms"), 50) if remote else None,
        "cross_process_p90_ms": cm.percentile(col(remote, "visible_ms"), 90) if remote else None,
        "ratio_p50_ours_vs_peer": ratio,
    })


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--observe":
        observe(sys.argv[2])
    else:
        asyncio.run(main())
