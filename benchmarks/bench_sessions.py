"""Sessions (seed 004): subagent fan-out beside LangGraph `Send`, and steer latency.

Fan-out (baselines.md workload 3). Ours: a parent session on the zero-latency simulator
spawns N subagents in one tool round (`spawn_subagents`, one commit that also claims each
child's job for the worker while it has free slots), every child runs one turn (turn
events, usage, reply, finish) and announces once
to the parent; the join wakes the parent, whose turn takes all N announces as ephemeral
context and answers. Timed from `send` to that answer committed (`run_until_idle`), with
`--concurrency` turns in flight (default N: every branch at once, as a LangGraph superstep
runs them). Counted: announces, duplicates per run_id (must be N and 0).
Peer, interleaved rep by rep in the same process (only if `langgraph` and
`langgraph-checkpoint-sqlite` import, e.g. from .venv-bench; benchmarks/requirements-peers.txt):
a graph fan -> N x `Send("work", ...)` -> join, SqliteSaver on a WAL connection with the same
synchronous mode, `invoke(..., durability="sync")`. Target: ours <= 0.8x LangGraph's wall
time (issue 36; seed 004 asked 0.5x). CPU time (the process's, every thread) is reported
beside it: on a shared machine it moves less with other people's load than wall does.
Then LangGraph once more with each branch an agent step as LangGraph users write one: one
`invoke` of a LangChain chat model, answering at once as our simulator does
(benchmarks/lg_chat.py); its ratio is reported, with no target.

Steer latency: a session in a long tool loop (zero-latency model and tool); `send` a message;
time until the turn's steering hook has injected it at the next safe boundary (its
`turnjob.steered` committed). The turn answers it, the backlog resumes the loop, the next
cycle sends again. p50/p90 over `--cycles`. Target: p50 <= 3 ms in-process (issue 36;
seed 004 asked 10 ms). `bench_turn_loop.py` reports the same p50 beside its rounds.
Beside it, alternated in two rounds, the same steer with every commit on the writer's
thread (`SQLiteStore.loop_writes = False`: the store before small batches committed on
the loop's thread, core/store/loopwrite.py).

    .venv/bin/python benchmarks/bench_sessions.py [--quick] [--n N] [--sync FULL|NORMAL]
    .venv-bench/bin/python benchmarks/bench_sessions.py         # with the LangGraph column
"""

from __future__ import annotations

import asyncio
import json
import operator
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, TypedDict

import _common as cm

import clawtower.core.sessions.runner as session_runner
from clawtower.core.agents.config import config_from_data
from clawtower.core.sessions.runner import SessionRunner
from clawtower.core.sessions.service import SessionLimits, Sessions
from clawtower.core.sessions.skills import SkillSet
from clawtower.core.sessions.specs import AgentSpecConfig
from clawtower.core.store import open_store
from clawtower.core.store.sqlite import SQLiteStore

TARGET_RATIO = 0.8  # issue 36 (seed 004 asked 0.5)
TARGET_STEER_P50_MS = 3.0  # issue 36 (seed 004 asked 10 ms)


# --------------------------------------------------------------------------- ours


async def ours_fanout(path: Path, n: int, sync: str, concurrency: int) -> dict[str, float]:
    cm.remove_db(path)
    store = await open_store(path, synchronous=sync)
    try:
        limits = SessionLimits(max_children=n)
        s = Sessions(store, limits)
        await s.set_spec("lead", AgentSpecConfig.model_validate(
            {"policy": {"tools": ["spawn_subagent", "spawn_subagents"],
                        "subagents": ["worker"]}}))
        await s.set_spec("worker", AgentSpecConfig.model_validate({"policy": {"tools": []}}))
        sid = await s.create(agent="lead")
        runner = SessionRunner(store, config_from_data({"speed": 0}, "bench"),
                               skills=SkillSet(), limits=limits, max_concurrent=concurrency,
                               tools=False)
        before = await store.last_seq()
        t0, c0 = time.perf_counter(), time.process_time()
        await s.send(sid, f"#spawn {n} worker a trivial part")
        ok = await runner.run_until_idle(3600)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        rows = await store.fetchall("SELECT payload FROM events WHERE type='session.announced'")
        runs = Counter(json.loads(r["payload"])["meta"]["source"]["run_id"] for r in rows)
        last = await store.fetchone("SELECT text FROM session_messages WHERE session_id=?"
                                    " ORDER BY seq DESC LIMIT 1", (sid,))
        events = await store.last_seq() - before
        assert ok and last is not None and last["text"].startswith(f"Synthesis of {n} ")
        return {"wall_s": wall, "cpu_s": cpu, "announces": float(sum(runs.values())),
                "duplicates": float(sum(c - 1 for c in runs.values())),
                "events": float(events)}
    finally:
        await store.close()


async def steer_latency(path: Path, cycles: int, sync: str) -> list[float]:
    cm.remove_db(path)
    store = await open_store(path, synchronous=sync)
    stamps: list[float] = []
    original = session_runner._steer

    def timed(tx: Any, claim: Any, owner: str, state: Any) -> list[str]:
        texts = original(tx, claim, owner, state)
        if texts:  # runs on the writer thread; the commit follows in the same batch
            stamps.append(time.perf_counter())
        return texts

    session_runner._steer = timed  # type: ignore[assignment]
    try:
        s = Sessions(store)
        await s.set_spec("looper", AgentSpecConfig.model_validate(
            {"policy": {"tools": ["text.count"]},
             "context_policy": {"history_messages": 6,
                                "budgets": {"max_tool_rounds": 1000}}}))
        sid = await s.create(agent="looper")
        runner = SessionRunner(store, config_from_data({"speed": 0}, "bench"),
                               skills=SkillSet())
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop))
        await s.send(sid, "#work 1000000 a long loop")
        out: list[float] = []
        used: set[str] = set()
        for _ in range(cycles):
            # wait until a turn of the session is inside its tool loop (a job not steered
            # yet: a message sent while a steered turn answers waits in the backlog instead)
            while True:
                row = await store.fetchone(
                    "SELECT j.id, count(*) AS n FROM turn_jobs j JOIN turn_tools t ON"
                    " t.turn_id=j.turn_id WHERE j.session_id=? AND j.status='running'"
                    " GROUP BY j.id", (sid,))
                if row and row["n"] >= 2 and row["id"] not in used:
                    used.add(row["id"])
                    break
                await asyncio.sleep(0.001)
            before = len(stamps)
            t0 = time.perf_counter()
            await s.send(sid, "status?")
            while len(stamps) == before:
                await store.wait_for_change(await store.last_seq(), 0.01)
            out.append((stamps[before] - t0) * 1e3)
        stop.set()
        await task
        return out
    finally:
        session_runner._steer = original  # type: ignore[assignment]
        await store.close()


# --------------------------------------------------------------------------- LangGraph


class State(TypedDict):  # module level: LangGraph reads the hints of its node functions
    n: int
    results: Annotated[list[int], operator.add]


class Item(TypedDict):
    i: int


def langgraph_fanout(path: Path, n: int, sync: str, model: bool = False) -> tuple[Any, str]:
    """LangGraph's fan-out; `model`: each branch one chat-model call on its part
    (lg_chat.py), as an agent step in LangGraph is written, beside our children's turns."""
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import Send
        from lg_chat import ask as chat  # LangChain: a dependency of LangGraph
        ask = chat if model else None
    except ImportError as exc:
        return None, (f"LangGraph column skipped: {exc.name or exc} is not installed here"
                      " (install benchmarks/requirements-peers.txt into a side venv)")

    def fan(state: State) -> dict[str, Any]:
        return {}

    def route(state: State) -> list[Any]:
        return [Send("work", {"i": i}) for i in range(state["n"])]

    def work(item: Item) -> dict[str, Any]:
        if ask is not None:
            ask(f"a trivial part ({item['i']})")
        return {"results": [item["i"]]}

    def join(state: State) -> dict[str, Any]:
        assert len(state["results"]) == state["n"]
        return {}

    b = StateGraph(State)
    b.add_node("fan", fan)
    b.add_node("work", work)
    b.add_node("join", join)
    b.add_edge(START, "fan")
    b.add_conditional_edges("fan", route, ["work"])
    b.add_edge("work", "join")
    b.add_edge("join", END)

    def run() -> dict[str, float]:
        cm.remove_db(path)
        conn = sqlite3.connect(path, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={sync}")
        graph = b.compile(checkpointer=SqliteSaver(conn))
        t0, c0 = time.perf_counter(), time.process_time()
        out = graph.invoke({"n": n, "results": []},
                           {"configurable": {"thread_id": "fan"}}, durability="sync")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        conn.close()
        assert len(out["results"]) == n
        return {"wall_s": wall, "cpu_s": cpu}

    return run, ""


# --------------------------------------------------------------------------- main


def main() -> None:
    p = cm.parser(__doc__.splitlines()[0], reps=5)
    p.add_argument("--n", type=int, default=None, help="subagents (default 1000; 100 quick)")
    p.add_argument("--sync", default="FULL", choices=["FULL", "NORMAL"])
    p.add_argument("--concurrency", type=int, default=None,
                   help="our turns in flight (default: N)")
    p.add_argument("--cycles", type=int, default=None, help="steer cycles (default 200)")
    args = p.parse_args()
    reps = cm.reps_of(args)
    n = args.n or (100 if args.quick else 1000)
    conc = args.concurrency or n
    cycles = args.cycles or (30 if args.quick else 200)
    info = cm.machine_info(Path(args.dir) if args.dir else None)
    cm.print_machine(info)
    results: dict[str, Any] = {"machine": info, "n": n, "sync": args.sync,
                               "concurrency": conc, "reps": reps}
    with cm.work_dir(args) as d:
        peer, why = langgraph_fanout(d / "lg.db", n, args.sync)
        if peer is None:
            print(why)
        agent_peer = langgraph_fanout(d / "lgm.db", n, args.sync, model=True)[0] \
            if peer is not None else None
        ours: list[dict[str, float]] = []
        theirs: list[dict[str, float]] = []
        theirs_model: list[dict[str, float]] = []
        for _ in range(reps):
            ours.append(asyncio.run(ours_fanout(d / "ours.db", n, args.sync, conc)))
            if peer is not None:
                theirs.append(peer())
            if agent_peer is not None:
                theirs_model.append(agent_peer())
        ow = [r["wall_s"] for r in ours]
        oc = [r["cpu_s"] for r in ours]
        rows = [["clawtower sessions", cm.fmt_num(cm.median(ow)), cm.spread(ow),
                 cm.fmt_num(cm.median(oc)),
                 f"{cm.median([r['announces'] for r in ours]):.0f}",
                 f"{max(r['duplicates'] for r in ours):.0f}",
                 f"{cm.median([r['events'] for r in ours]) / n:.2f}"]]
        results["ours"] = ours
        if theirs:
            tw = [r["wall_s"] for r in theirs]
            tc = [r["cpu_s"] for r in theirs]
            ratios = [a / b for a, b in zip(ow, tw, strict=True)]
            cpu_ratios = [a / b for a, b in zip(oc, tc, strict=True)]
            rows.append(["LangGraph Send + SqliteSaver", cm.fmt_num(cm.median(tw)),
                         cm.spread(tw), cm.fmt_num(cm.median(tc)), f"{n}", "-", "-"])
            results["langgraph"] = theirs
            results["ratio_median"] = cm.median(ratios)
            results["cpu_ratio_median"] = cm.median(cpu_ratios)
            rows.append(["ratio ours/LangGraph (paired)", cm.fmt_num(cm.median(ratios)),
                         cm.spread(ratios), cm.fmt_num(cm.median(cpu_ratios)), "",
                         f"target <= {TARGET_RATIO}", ""])
        if theirs_model:  # LangGraph's branches as agent steps: one chat-model call each
            mw = [r["wall_s"] for r in theirs_model]
            mc = [r["cpu_s"] for r in theirs_model]
            mr = [a / b for a, b in zip(ow, mw, strict=True)]
            rows.append(["LangGraph, a chat-model call each", cm.fmt_num(cm.median(mw)),
                         cm.spread(mw), cm.fmt_num(cm.median(mc)), f"{n}", "-", "-"])
            rows.append(["ratio ours/LangGraph with calls", cm.fmt_num(cm.median(mr)),
                         cm.spread(mr), cm.fmt_num(cm.median(
                             [a / b for a, b in zip(oc, mc, strict=True)])), "",
                         "(no target)", ""])
            results["langgraph_model_calls"] = theirs_model
            results["ratio_model_calls_median"] = cm.median(mr)
        cm.print_table(f"Fan-out: {n} subagents, announces joined ({args.sync}, {reps} reps,"
                       f" {conc} in flight), seconds (CPU: the process's, both threads)",
                       ["workload", "median wall", "range", "median CPU", "announces",
                        "duplicates", "events/child"], rows)
        lats: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(2):  # alternated: small commits on the loop's thread, then not
            for here in (True, False):
                SQLiteStore.loop_writes = here
                try:
                    lats[here] += asyncio.run(steer_latency(d / "steer.db", cycles,
                                                            args.sync))
                finally:
                    SQLiteStore.loop_writes = True
        results["steer_ms"] = lat = lats[True]
        results["steer_ms_writer_thread"] = lats[False]
        cm.print_table(f"Steer latency: send -> injected at the next boundary ({cycles} cycles"
                       f" x 2, {args.sync}), ms",
                       ["commits", "p50", "p90", "max", "target"],
                       [["small ones on the loop's thread", cm.fmt_num(cm.percentile(lat, 50)),
                         cm.fmt_num(cm.percentile(lat, 90)), cm.fmt_num(max(lat)),
                         f"p50 <= {TARGET_STEER_P50_MS}"],
                        ["all on the writer's thread (before)",
                         cm.fmt_num(cm.percentile(lats[False], 50)),
                         cm.fmt_num(cm.percentile(lats[False], 90)),
                         cm.fmt_num(max(lats[False])), ""]])
    cm.write_json(args.json, results)


if __name__ == "__main__":
    main()
