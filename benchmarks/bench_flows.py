"""Flows (seed 003): a random task DAG through the flow engine, and the same DAG in LangGraph.

Workload: the root agent decomposes its task into N subtasks in layers of `--width` (100),
each subtask after the first layer depending on 1-3 random subtasks of the layer before
(seeded); every subtask executes, the root synthesises. Agents are simulated with zero
latency (`PlanBrain`: no model), so what is measured is the engine: the decomposition's
validation, every TASK dispatched, taken, executed and REPLYed (mailbox rows, counters,
ready children dispatched in the completion's commit, the agents' session transcripts),
with `--concurrency` turns in flight (default: the width). Timed from the flow's start
to its result committed. Bytes per subtask: the store's files after the run, divided by N.

Growth: 1,000 / 10,000 / 100,000 subtasks (`--sizes`); 10x nodes must take <= 11x time.

Peer (only if `langgraph` and `langgraph-checkpoint-sqlite` import, e.g. from .venv-bench;
benchmarks/requirements-peers.txt), at 1,000 subtasks, interleaved rep by rep: the same DAG
as a StateGraph, one node per subtask, `add_edge([deps...], node)` joins (a node runs once
all its dependencies ran), a synthesis node after the sinks, a dict-merge reducer for the
results, SqliteSaver on a WAL connection with the same synchronous mode, `invoke(...,
durability="sync")`; compiling the graph is not timed. Target: ours <= 0.35x its wall
time (issue 24; seed 003 asked 0.5x).

With `--turns`, every size also runs with each executed node a TurnJob in a session of
its agent (`TurnBrain` over `PlanBrain`, the session worker in the same process, the
simulator at speed 0): the node's session, TASK message, job and its claim in one commit,
the turn's records, the reply and the job's end, then the REPLY. Target: <= 1x LangGraph.
Beside it, LangGraph once more with each node an agent step as LangGraph users write one:
one `invoke` of a LangChain chat model on the node's task, answering at once as our
simulator does (benchmarks/lg_chat.py); its ratio is reported, with no target of its own.

    .venv/bin/python benchmarks/bench_flows.py [--quick] [--sizes 1000,10000,100000] [--turns]
    .venv-bench/bin/python benchmarks/bench_flows.py         # with the LangGraph column
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import operator
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict, TypeVar

import _common as cm

from clawtower.core.agents.config import config_from_data
from clawtower.core.flows.brains import PlanBrain
from clawtower.core.flows.engine import FlowEngine
from clawtower.core.flows.plan import FlowLimits
from clawtower.core.flows.service import Flows
from clawtower.core.flows.turns import TurnBrain
from clawtower.core.sessions import runner as _runner  # noqa: F401  (imported before any timing)
from clawtower.core.sessions.service import Sessions
from clawtower.core.sessions.specs import AgentSpecConfig
from clawtower.core.store import open_store

TARGET_RATIO = 0.35  # issue 24 (seed 003: 0.5)
TARGET_TURNS = 1.0  # nodes as TurnJobs (issue 21): at most LangGraph's wall time
TARGET_GROWTH = 11.0


R = TypeVar("R")
FREEZE = True  # --no-freeze: measure with the process's older objects in the collector


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Each measured run starts with the objects already alive (the other side's graph, the
    imports) frozen out of the cyclic collector, for ours and LangGraph's runs alike: they
    run in one process, and the peer's compiled 1,000-node graph made every full collection
    during our run scan it (our wall +40-50% beside it; BENCHMARKS.md, issue 24)."""
    if not FREEZE:
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def measured(run: Callable[[], R]) -> R:
    with frozen_heap():
        return run()


def random_dag(n: int, width: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    subs: list[dict[str, Any]] = []
    for i in range(n):
        layer = i // width
        lo = (layer - 1) * width
        deps = sorted({f"n{lo + rng.randrange(width)}" for _ in range(rng.randint(1, 3))}
                      ) if layer else []
        subs.append({"id": f"n{i}", "agent": "worker", "instruction": f"part {i}",
                     "depends_on": deps})
    return subs


def db_bytes(path: Path) -> int:
    return sum(os.path.getsize(f"{path}{s}") for s in ("", "-wal")
               if os.path.exists(f"{path}{s}"))


async def ours(path: Path, dag: list[dict[str, Any]], sync: str, concurrency: int,
               turns: bool = False) -> dict[str, float]:
    cm.remove_db(path)
    store = await open_store(path, synchronous=sync)
    n = len(dag)
    try:
        s = Sessions(store)
        await s.set_spec("lead", AgentSpecConfig.model_validate(
            {"policy": {"subagents": ["worker"]}}))
        await s.set_spec("worker", AgentSpecConfig.model_validate({"policy": {"subagents": []}}))
        flows = Flows(store, FlowLimits(max_width=n, max_nodes=n + 1))
        before = await store.last_seq()
        brain: Any = PlanBrain({"root": dag})
        if turns:  # every executed node a TurnJob on the zero-latency simulator
            brain = TurnBrain(store, brain, config=config_from_data({"speed": 0}, "bench"),
                              max_concurrent=concurrency)
        engine = FlowEngine(store, brain, concurrency=concurrency)
        t0, c0 = time.perf_counter(), time.process_time()
        fid = await flows.start("lead", f"a DAG of {n} subtasks")
        flow = await engine.run_flow(fid)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert flow["status"] == "done" and flow["done"] == n + 1, flow
        assert flow["result"] == f"lead combined {n} results", flow["result"]
        sent = await store.fetchone("SELECT count(*) AS c, count(DISTINCT json_extract("
                                    "payload, '$.task_id')) AS d FROM events WHERE"
                                    " type='flow.task_sent'")
        assert sent is not None and sent["c"] == sent["d"] == n + 1
        events = await store.last_seq() - before
    finally:
        await store.close()
    return {"wall_s": wall, "cpu_s": cpu, "bytes_per_subtask": db_bytes(path) / n,
            "events_per_subtask": events / n}


# --------------------------------------------------------------------------- LangGraph


def _merge(a: dict[str, str], b: dict[str, str]) -> dict[str, str]:
    return {**a, **b}


class State(TypedDict):  # module level: LangGraph reads the hints of its node functions
    results: Annotated[dict[str, str], _merge]
    synthesis: Annotated[list[str], operator.add]


def langgraph_dag(path: Path, dag: list[dict[str, Any]], sync: str,
                  model: bool = False) -> tuple[Any, str]:
    """LangGraph's run of `dag`; `model`: each node one chat-model call on its task
    (lg_chat.py), as an agent step in LangGraph is written, beside our nodes as turns."""
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
        from lg_chat import ask as chat  # LangChain: a dependency of LangGraph
        ask = chat if model else None
    except ImportError as exc:
        return None, (f"LangGraph column skipped: {exc.name or exc} is not installed here"
                      " (install benchmarks/requirements-peers.txt into a side venv)")
    n = len(dag)
    tasks = {s["id"]: f"TASK {s['id']}\n{s['instruction']}" for s in dag}

    def node(name: str) -> Any:
        def run(state: State) -> dict[str, Any]:
            return {"results": {name: ask(tasks[name]) if ask else f"worker did {name}"}}
        return run

    def synth(state: State) -> dict[str, Any]:
        assert len(state["results"]) == n
        return {"synthesis": [f"lead combined {len(state['results'])} results"]}

    b = StateGraph(State)
    has_dependents: set[str] = set()
    for s in dag:
        b.add_node(s["id"], node(s["id"]))
        has_dependents.update(s["depends_on"])
    for s in dag:
        deps = s["depends_on"]
        if not deps:
            b.add_edge(START, s["id"])
        elif len(deps) == 1:
            b.add_edge(deps[0], s["id"])
        else:
            b.add_edge(deps, s["id"])
    b.add_node("synth", synth)
    b.add_edge([s["id"] for s in dag if s["id"] not in has_dependents], "synth")
    b.add_edge("synth", END)

    def run() -> dict[str, float]:
        cm.remove_db(path)
        conn = sqlite3.connect(path, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={sync}")
        graph = b.compile(checkpointer=SqliteSaver(conn))
        t0, c0 = time.perf_counter(), time.process_time()
        out = graph.invoke({"results": {}, "synthesis": []},
                           {"configurable": {"thread_id": "dag"}}, durability="sync")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        conn.close()
        assert len(out["results"]) == n and out["synthesis"] == [
            f"lead combined {n} results"], out["synthesis"]
        return {"wall_s": wall, "cpu_s": cpu, "bytes_per_subtask": db_bytes(path) / n}

    return run, ""


# --------------------------------------------------------------------------- main


def main() -> None:
    p = cm.parser(__doc__.splitlines()[0], reps=3)
    p.add_argument("--sizes", default=None,
                   help="subtask counts, comma-separated (default 1000,10000,100000;"
                        " quick: 200,2000)")
    p.add_argument("--width", type=int, default=100, help="subtasks per layer (default 100)")
    p.add_argument("--sync", default="FULL", choices=["FULL", "NORMAL"])
    p.add_argument("--concurrency", type=int, default=None,
                   help="agent turns in flight (default: the width)")
    p.add_argument("--turns", action="store_true",
                   help="also run every size with nodes as TurnJobs (session turns on the"
                        " zero-latency simulator) beside PlanBrain")
    p.add_argument("--peer-size", type=int, default=1000,
                   help="the size also run in LangGraph (default 1000)")
    p.add_argument("--no-freeze", action="store_true",
                   help="do not freeze the objects alive before each run out of the garbage"
                        " collector (the method before issue 24)")
    args = p.parse_args()
    global FREEZE
    FREEZE = not args.no_freeze
    reps = cm.reps_of(args)
    sizes = [int(x) for x in (args.sizes or ("200,2000" if args.quick else
                                             "1000,10000,100000")).split(",")]
    conc = args.concurrency or args.width
    info = cm.machine_info(Path(args.dir) if args.dir else None)
    cm.print_machine(info)
    results: dict[str, Any] = {"machine": info, "sizes": sizes, "width": args.width,
                               "sync": args.sync, "concurrency": conc, "reps": reps}
    with cm.work_dir(args) as d:
        dags = {n: random_dag(n, args.width) for n in sizes}
        peer, why = (langgraph_dag(d / "lg.db", dags[args.peer_size], args.sync)
                     if args.peer_size in dags else (None, "no peer size among --sizes"))
        if peer is None:
            print(why)
        agent_peer = (langgraph_dag(d / "lgm.db", dags[args.peer_size], args.sync,
                                    model=True)[0] if peer is not None and args.turns else None)
        ours_runs: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
        turn_runs: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
        theirs: list[dict[str, float]] = []
        theirs_model: list[dict[str, float]] = []
        for _ in range(reps):
            for n in sizes:
                ours_runs[n].append(measured(lambda n=n: asyncio.run(
                    ours(d / "ours.db", dags[n], args.sync, conc))))
                if args.turns:
                    turn_runs[n].append(measured(lambda n=n: asyncio.run(
                        ours(d / "turns.db", dags[n], args.sync, conc, turns=True))))
                if peer is not None and n == args.peer_size:
                    theirs.append(measured(peer))
                    if agent_peer is not None:
                        theirs_model.append(measured(agent_peer))
        rows = []
        med: dict[int, float] = {}
        for n in sizes:
            w = [r["wall_s"] for r in ours_runs[n]]
            med[n] = cm.median(w)
            rows.append([f"clawtower flows, {n:,}", cm.fmt_num(med[n]), cm.spread(w),
                         cm.fmt_num(cm.median([r["cpu_s"] for r in ours_runs[n]])),
                         f"{n / med[n]:,.0f}",
                         f"{cm.median([r['bytes_per_subtask'] for r in ours_runs[n]]):,.0f}",
                         f"{cm.median([r['events_per_subtask'] for r in ours_runs[n]]):.2f}"])
            if args.turns:
                tw = [r["wall_s"] for r in turn_runs[n]]
                rows.append([f"clawtower flows, nodes as TurnJobs, {n:,}",
                             cm.fmt_num(cm.median(tw)), cm.spread(tw),
                             cm.fmt_num(cm.median([r["cpu_s"] for r in turn_runs[n]])),
                             f"{n / cm.median(tw):,.0f}",
                             f"{cm.median([r['bytes_per_subtask'] for r in turn_runs[n]]):,.0f}",
                             f"{cm.median([r['events_per_subtask'] for r in turn_runs[n]]):.2f}"])
        results["ours"] = {str(n): v for n, v in ours_runs.items()}
        if args.turns:
            results["turns"] = {str(n): v for n, v in turn_runs.items()}
        if theirs:
            tw = [r["wall_s"] for r in theirs]
            ow = [r["wall_s"] for r in ours_runs[args.peer_size]]
            ratios = [a / b for a, b in zip(ow, tw, strict=True)]
            rows.append([f"LangGraph StateGraph + SqliteSaver, {args.peer_size:,}",
                         cm.fmt_num(cm.median(tw)), cm.spread(tw),
                         cm.fmt_num(cm.median([r["cpu_s"] for r in theirs])),
                         f"{args.peer_size / cm.median(tw):,.0f}",
                         f"{cm.median([r['bytes_per_subtask'] for r in theirs]):,.0f}", "-"])
            rows.append(["ratio ours/LangGraph (paired)", cm.fmt_num(cm.median(ratios)),
                         cm.spread(ratios), "", "", "", f"target <= {TARGET_RATIO}"])
            results["langgraph"] = theirs
            results["ratio_median"] = cm.median(ratios)
            if args.turns:
                tr = [a["wall_s"] / b for a, b in zip(turn_runs[args.peer_size], tw,
                                                      strict=True)]
                rows.append(["ratio TurnJobs/LangGraph (paired)", cm.fmt_num(cm.median(tr)),
                             cm.spread(tr), "", "", "", f"target <= {TARGET_TURNS}"])
                results["turns_ratio_median"] = cm.median(tr)
            if theirs_model:  # LangGraph's nodes as agent steps: one chat-model call each
                mw = [r["wall_s"] for r in theirs_model]
                rows.append([f"LangGraph, each node a chat-model call, {args.peer_size:,}",
                             cm.fmt_num(cm.median(mw)), cm.spread(mw),
                             cm.fmt_num(cm.median([r["cpu_s"] for r in theirs_model])),
                             f"{args.peer_size / cm.median(mw):,.0f}",
                             f"{cm.median([r['bytes_per_subtask'] for r in theirs_model]):,.0f}",
                             "-"])
                mr = [a["wall_s"] / b for a, b in zip(turn_runs[args.peer_size], mw,
                                                      strict=True)]
                rows.append(["ratio TurnJobs/LangGraph with model calls (paired)",
                             cm.fmt_num(cm.median(mr)), cm.spread(mr), "", "", "",
                             "(no target)"])
                results["langgraph_model_calls"] = theirs_model
                results["turns_ratio_model_calls_median"] = cm.median(mr)
        cm.print_table(f"Random DAG, width {args.width} ({args.sync}, {reps} reps, {conc} in"
                       " flight), seconds", ["workload", "median wall", "range", "median CPU",
                                             "subtasks/s", "bytes/subtask", "events/subtask"],
                       rows)
        growth = [[f"{a:,} -> {b:,}", f"{b / a:.0f}x", f"{med[b] / med[a]:.2f}x",
                   f"<= {TARGET_GROWTH * (b / a) / 10:.0f}x"]
                  for a, b in itertools.pairwise(sizes)]
        results["growth"] = {f"{a}->{b}": med[b] / med[a]
                             for a, b in itertools.pairwise(sizes)}
        if growth:
            cm.print_table("Growth of the median wall time", ["sizes", "nodes", "time",
                                                              "target"], growth)
    cm.write_json(args.json, results)


if __name__ == "__main__":
    main()
