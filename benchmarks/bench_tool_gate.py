"""Tool-call approval gate overhead across processes: an operator approves a confirm-tier
call in THIS process -> the session worker in ANOTHER process resumes the paused turn and
starts the call.

A worker process runs `SessionRunner.run()` (woken by the store's cross-process notifier,
as `clawtower serve` is) over a registry whose tool box logs CLOCK_MONOTONIC when a call
starts. This process sends `#call clock.now {}` to a session whose spec makes `clock.now`
confirm-tier, waits until the approval is pending, then times:

  decision      approve() called -> it returned (the decision and `turnjob.resumed` committed)
  to call       approve() called -> the worker started the call (target: p50 <= 5 ms)

Floor, interleaved rep by rep: an auto-tier call's cost from the same worker is not
comparable (no second process is woken), so the floor is the store's own cross-process
wake-up: a plain event committed here -> the worker process sees it (bench_wakeup's path).

    .venv/bin/python benchmarks/bench_tool_gate.py [--quick] [--reps N] [--n N] [--json P]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as cm

TARGET_P50_MS = 5.0
CONFIRM = {"policy": {"tools": ["clock.now"],
                      "approval": {"default": "auto", "tools": {"clock.now": "confirm"}}}}


async def worker(db: str, log: str) -> None:
    """The session worker: logs each tool call's start; also logs when it sees a `note`."""
    from clawtower.core.agents.config import config_from_data
    from clawtower.core.sessions.runner import SessionRunner
    from clawtower.core.sessions.skills import SkillSet
    from clawtower.core.store import open_store
    from clawtower.core.tools.registry import ToolRegistry

    store = await open_store(db)
    out = open(log, "a", encoding="utf-8")  # noqa: SIM115 - closed at exit

    class Box:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def specs(self) -> Any:
            return await self.inner.specs()

        async def resolve(self, name: str) -> Any:
            return await self.inner.resolve(name)

        async def call(self, name: str, arguments: str) -> Any:
            out.write(json.dumps({"call": time.monotonic()}) + "\n")
            out.flush()
            return await self.inner.call(name, arguments)

    class Registry(ToolRegistry):
        def toolbox(self, allow: Any = None, deny: Any = (), *, agent: str = "agent",
                    progress: Any = None) -> Any:
            return Box(super().toolbox(allow, deny, agent=agent, progress=progress))

    runner = SessionRunner(store, config_from_data({"speed": 0}, "bench"),
                           registry=Registry(store), skills=SkillSet())
    print("READY", flush=True)
    seen = asyncio.create_task(floor_watch(store, out))
    try:
        await runner.run()
    finally:
        seen.cancel()
        await store.close()


async def floor_watch(store: Any, out: Any) -> None:
    """The floor: log when each `note` event (committed by the other process) is seen."""
    seq = await store.last_seq()
    while True:
        new = await store.wait_for_change(seq, 1.0)
        if new == seq:
            continue
        rows = await store.fetchall("SELECT seq, payload FROM events WHERE"
                                    " type='note.added' AND seq > ? ORDER BY seq", (seq,))
        now = time.monotonic()
        for r in rows:
            out.write(json.dumps({"note": json.loads(r["payload"])["text"], "seen": now})
                      + "\n")
        out.flush()
        seq = new


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


async def one_rep(work: Path, n: int, rep: int) -> dict[str, list[float]]:
    from clawtower.core import events as ev
    from clawtower.core.approvals import Approvals
    from clawtower.core.events import NewEvent
    from clawtower.core.sessions.service import Sessions
    from clawtower.core.sessions.specs import AgentSpecConfig
    from clawtower.core.store import open_store

    db, log = work / f"gate-{rep}.db", work / f"gate-{rep}.jsonl"
    cm.remove_db(db)
    store = await open_store(str(db))
    sessions = Sessions(store)
    await sessions.set_spec("clerk", AgentSpecConfig.model_validate(CONFIRM))
    sid = await sessions.create(agent="clerk")
    env = dict(os.environ, PYTHONPATH=str(cm.REPO))
    proc = subprocess.Popen([sys.executable, __file__, "--worker", str(db), str(log)],
                            env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
    out: dict[str, list[float]] = {"decision": [], "to_call": [], "floor": []}
    ap = Approvals(store)
    try:
        for i in range(n):
            await sessions.send(sid, "#call clock.now {}")
            seq = await store.last_seq()
            while not (pending := await ap.pending()):
                seq = await store.wait_for_change(seq, 1.0)
            calls_before = sum(1 for x in _lines(log) if "call" in x)
            t0 = time.monotonic()
            await ap.approve(pending[0]["id"], by="bench")
            t1 = time.monotonic()
            while sum(1 for x in _lines(log) if "call" in x) == calls_before:
                await asyncio.sleep(0.0005)
            started = [x["call"] for x in _lines(log) if "call" in x][-1]
            out["decision"].append((t1 - t0) * 1000)
            out["to_call"].append((started - t0) * 1000)
            while (await sessions.get(sid))["status"] != "idle":
                await asyncio.sleep(0.002)
            # the floor: a plain event committed here -> seen by the worker process
            t2 = time.monotonic()
            await store.append([NewEvent(entity_id="bench", actor="bench", role="system",
                                         payload=ev.Note(text=f"{rep}-{i}"))])
            while not any(x.get("note") == f"{rep}-{i}" for x in _lines(log)):
                await asyncio.sleep(0.0005)
            seen = next(x["seen"] for x in _lines(log) if x.get("note") == f"{rep}-{i}")
            out["floor"].append((seen - t2) * 1000)
    finally:
        proc.kill()
        proc.wait()
        await store.close()
    return out


async def main(args: argparse.Namespace) -> None:
    reps = cm.reps_of(args)
    n = args.n or (10 if args.quick else 50)
    results: dict[str, list[float]] = {"decision": [], "to_call": [], "floor": []}
    with cm.work_dir(args) as work:
        for rep in range(reps):
            r = await one_rep(work, n, rep)
            for k, v in r.items():
                results[k].extend(v)
    cm.latency_report(f"tool-call gate, ms ({reps} reps x {n} approvals)", results,
                      "to_call", "decision -> call started", TARGET_P50_MS, "wake-up floor",
                      args.json)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        asyncio.run(worker(sys.argv[2], sys.argv[3]))
        sys.exit(0)
    p = cm.parser(__doc__ or "", reps=3)
    p.add_argument("--n", type=int, default=None, help="approvals per rep")
    asyncio.run(main(p.parse_args()))
