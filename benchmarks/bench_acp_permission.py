"""ACP permission round trip across processes: a harness asks -> an operator's console in
ANOTHER process sees the request -> answers -> the harness has the answer.

Three processes: this one drives the harness (core.acp.bridge.AcpTurn; the request becomes
an approval in the store), an observer process stands for an attached console (it waits in
`store.wait_for_change`, woken by the store's cross-process notifier, reads
`Approvals.pending()` and approves at once), and the harness (benchmarks/acp_bench_agent.py,
a minimal agent on the official ACP SDK asking `session/request_permission` N times).
Times are CLOCK_MONOTONIC, one clock for every process of the machine:

  visible    the harness sends the request -> the observer has it in its pending list
  delivered  the observer's approve() returned (committed) -> the harness has the answer
  end to end the harness sends the request -> it has the answer (target: p50 <= 50 ms)

Floor, interleaved rep by rep: the same harness answered in-process by a bare SDK client
(no store, no other process): the protocol's own round trip over stdio.

    .venv/bin/python benchmarks/bench_acp_permission.py [--quick] [--reps N] [--n N] [--json P]
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

AGENT = Path(__file__).resolve().parent / "acp_bench_agent.py"
TARGET_P50_MS = 50.0


async def observer(db: str, out: str, n: int) -> None:
    """The attached console: sees each request, approves it at once, logs both times."""
    from clawtower.core.approvals import Approvals
    from clawtower.core.store import open_store

    store = await open_store(db)
    seen: set[str] = set()
    ap = Approvals(store)
    with open(out, "a", encoding="utf-8") as log:
        print("READY", flush=True)
        while len(seen) < n:
            seq = await store.last_seq()
            for a in await ap.pending():
                if a["kind"] != "acp_permission" or a["id"] in seen:
                    continue
                vis = time.monotonic()
                seen.add(a["id"])
                await ap.approve(a["id"], by="bench")
                ans = time.monotonic()
                log.write(json.dumps({"id": a["id"], "vis": vis, "ans": ans}) + "\n")
                log.flush()
            await store.wait_for_change(seq, 1.0)
    await store.close()


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


async def ours(work: Path, n: int, rep: int) -> dict[str, list[float]]:
    from clawtower.core.acp.bridge import AcpTurn
    from clawtower.core.acp.config import HarnessConfig
    from clawtower.core.store import open_store

    db = work / f"acp-{rep}.db"
    agent_log, obs_log = work / f"agent-{rep}.jsonl", work / f"obs-{rep}.jsonl"
    store = await open_store(str(db))
    env = dict(os.environ, PYTHONPATH=str(cm.REPO))
    obs = subprocess.Popen([sys.executable, __file__, "--observer", str(db), str(obs_log),
                            str(n)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert obs.stdout is not None and obs.stdout.readline().strip() == "READY"
        h = HarnessConfig(name="bench", command=sys.executable, args=[str(AGENT)],
                          env={"ACP_BENCH_LOG": str(agent_log), "PYTHONPATH": str(cm.REPO)},
                          permission_timeout_s=60)
        out = await AcpTurn(store, h, str(n), workspace=str(work)).run()
        assert out.ok, out
        obs.wait(60)
    finally:
        if obs.poll() is None:
            obs.kill()
        await store.close()
    sent = _lines(agent_log)
    seen = _lines(obs_log)
    assert len(sent) == len(seen) == n, (len(sent), len(seen))
    return {"visible": [(o["vis"] - a["sent"]) * 1000 for a, o in zip(sent, seen, strict=True)],
            "delivered": [(a["got"] - o["ans"]) * 1000 for a, o in zip(sent, seen,
                                                                      strict=True)],
            "end_to_end": [(a["got"] - a["sent"]) * 1000 for a in sent]}


async def floor(work: Path, n: int, rep: int) -> list[float]:
    from acp import Client, spawn_agent_process, text_block
    from acp.schema import AllowedOutcome, RequestPermissionResponse

    class Answer(Client):  # type: ignore[misc]
        async def request_permission(self, *a: Any, **kw: Any) -> RequestPermissionResponse:
            return RequestPermissionResponse(outcome=AllowedOutcome(option_id="allow",
                                                                    outcome="selected"))

        async def session_update(self, *a: Any, **kw: Any) -> None:
            return None

    log = work / f"floor-{rep}.jsonl"
    env = {"ACP_BENCH_LOG": str(log), "PYTHONPATH": str(cm.REPO), "PATH": os.environ["PATH"]}
    async with spawn_agent_process(Answer(), sys.executable, str(AGENT), env=env) as (conn, _):
        await conn.initialize(protocol_version=1)
        s = await conn.new_session(cwd=str(work), mcp_servers=[])
        await conn.prompt(session_id=s.session_id, prompt=[text_block(str(n))])
    return [(a["got"] - a["sent"]) * 1000 for a in _lines(log)]


async def main(args: argparse.Namespace) -> None:
    reps = cm.reps_of(args)
    n = args.n or (10 if args.quick else 100)
    results: dict[str, list[float]] = {"visible": [], "delivered": [], "end_to_end": [],
                                       "floor": []}
    with cm.work_dir(args) as work:
        for rep in range(reps):
            got = await ours(work, n, rep)
            for k, v in got.items():
                results[k].extend(v[2:])  # the first requests warm up connections
            results["floor"].extend((await floor(work, n, rep))[2:])
    cm.latency_report(f"ACP permission round trip, ms ({reps} reps x {n} requests)", results,
                      "end_to_end", "end to end", TARGET_P50_MS, "floor", args.json)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--observer":
        asyncio.run(observer(sys.argv[2], sys.argv[3], int(sys.argv[4])))
        sys.exit(0)
    p = cm.parser(__doc__ or "", reps=3)
    p.add_argument("--n", type=int, default=None, help="permission requests per rep")
    asyncio.run(main(p.parse_args()))
