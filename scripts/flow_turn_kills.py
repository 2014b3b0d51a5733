"""kill -9 of a flow engine whose executed nodes are TurnJobs (its session worker in the
same process), again and again, then a last engine finishes the flow; per trial and in
total: kills that landed mid-flow, duplicate dispatches and replies, lost tasks, tool calls
that ran more than once per node, nodes whose call ran never, turns taken over, results a
taken-over turn reused instead of calling again, and whether
the projections equal a replay. The README's "with nodes as TurnJobs" figures come from it.

    .venv/bin/python scripts/flow_turn_kills.py [--trials N] [--kills K] [--seed S]

Each trial is tests/test_flows_crash.py's `trial(..., turns=True)` (tests/helpers/
flow_worker.py --turns: a 19-task two-level DAG, model calls 0-150 ms, each executed node's
agent calls text.count once, worker leases of 1 s).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "helpers")]

KEYS = ("kills_mid_flow", "duplicate_dispatches", "duplicate_replies", "lost",
        "duplicate_tool_effects", "nodes_without_effect", "turns_taken_over", "results_reused",
        "node_turns")


async def main(trials: int, kills: int, seed: int) -> int:
    import test_flows_crash as crash

    rng = random.Random(seed)
    total = dict.fromkeys(KEYS, 0) | {"flows_done": 0, "replay_equal": 0}
    with tempfile.TemporaryDirectory() as d:
        for i in range(trials):
            f = await crash.trial(Path(d) / f"k{i}.db", seed + i, kills=kills, rng=rng,
                                  turns=True)
            print(f"trial {i}: " + ", ".join(f"{k} {f[k]}" for k in KEYS)
                  + f", status {f['status']}, verify {f['verify'] or 'ok'}", flush=True)
            for k in KEYS:
                total[k] += int(f[k])
            total["flows_done"] += f["status"] == "done"
            total["replay_equal"] += f["verify"] == []
    print(f"TOTAL over {trials} trials: " + ", ".join(f"{k} {v}" for k, v in total.items()))
    bad = total["duplicate_dispatches"] + total["duplicate_replies"] + total["lost"] + \
        total["duplicate_tool_effects"]
    return 0 if bad == 0 and total["flows_done"] == trials else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--kills", type=int, default=8)
    p.add_argument("--seed", type=int, default=2026)
    a = p.parse_args()
    sys.exit(asyncio.run(main(a.trials, a.kills, a.seed)))
