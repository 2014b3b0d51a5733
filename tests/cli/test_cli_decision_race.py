"""Two racing decisions on one workflow gate: `clawtower approve ID & clawtower reject ID`.

Exactly one wins (exit 0); the loser exits non-zero with one line saying what won:
"approval ID: already decided: rejected by bob at 2026-...Z". Run as real concurrent
processes against one store, many pairs at once (the store is shared by every pair, so
the writers also contend across pairs).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
from pathlib import Path

from cli_helpers import CLAWTOWER, child_env, query

PAIRS = int(os.environ.get("CLAWTOWER_RACE_PAIRS", "20"))  # more: a soak, by hand
AT_ONCE = 10  # pairs started together (20 processes): contention across pairs too
GATE = "name: gate\nsteps:\n  - id: ship\n    approval: Ship it?\n"
LOSER = re.compile(r"^clawtower: error: approval '(\w+)': already decided: (approved|rejected)"
                   r" by (alice|bob) at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


async def _gates(db: Path, flow: Path, n: int) -> list[str]:
    """`n` runs paused at their approval gate, through the core API (fast)."""
    from clawtower.core.store import open_store
    from clawtower.core.workflows.service import Workflows

    store = await open_store(db)
    try:
        wf = Workflows(store, env={}, cwd=str(flow.parent))
        ids = []
        for _ in range(n):
            env = await wf.run(str(flow))
            assert env["status"] == "needs_approval", env
            ids.append(env["requiresApproval"]["approvalId"])
        return ids
    finally:
        await store.close()


def test_racing_approve_and_reject_one_wins(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = tmp_path / "race.db"
    flow = tmp_path / "gate.lobster"
    flow.write_text(GATE)
    gates = asyncio.run(_gates(db, flow, PAIRS))
    env = child_env(home)
    env.pop("LOBSTER_APPROVAL_APPROVED_BY", None)
    won = {"approved": 0, "rejected": 0}
    started = time.monotonic()
    for i in range(0, len(gates), AT_ONCE):
        batch = gates[i:i + AT_ONCE]
        procs = []
        for aid in batch:
            argv = {"approved": ["approve", aid, "--by", "alice"],
                    "rejected": ["reject", aid, "--by", "bob", "--reason", "race"]}
            procs.append((aid, {d: subprocess.Popen(
                [str(CLAWTOWER), *a, "--db", str(db)], env=env, cwd=str(tmp_path),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for d, a in argv.items()}))
        for aid, pair in procs:
            out = {d: p.communicate(timeout=120) for d, p in pair.items()}
            codes = {d: p.returncode for d, p in pair.items()}
            winners = [d for d, c in codes.items() if c == 0]
            assert len(winners) == 1, (aid, codes, out)
            (winner,) = winners
            loser = "rejected" if winner == "approved" else "approved"
            assert codes[loser] == 2, (aid, codes, out)
            stdout, stderr = out[loser]
            assert stdout == "", (aid, out)
            lines = stderr.splitlines()
            assert len(lines) == 1 and "Traceback" not in stderr, (aid, stderr)
            m = LOSER.match(lines[0])
            assert m is not None, lines
            who = "alice" if winner == "approved" else "bob"
            assert m.groups() == (aid, winner, who), (lines, winner)
            assert out[winner][0].startswith(f"{aid}: {winner} by {who}"), out[winner]
            won[winner] += 1
    elapsed = time.monotonic() - started
    # the store agrees with the winners: one decision per gate, and the run followed it
    rows = query(db, "SELECT a.id, a.status, a.decided_by, r.status FROM approvals a"
                     " JOIN workflow_runs r ON r.approval_id = a.id")
    assert len(rows) == PAIRS
    for aid, status, by, run_status in rows:
        assert (status, by) in (("approved", "alice"), ("rejected", "bob")), aid
        assert run_status == ("ok" if status == "approved" else "cancelled"), aid
    decided = query(db, "SELECT coalesce(json_extract(payload, '$.approval_id'), entity_id),"
                        " count(*) FROM events WHERE type='approval.decided' OR"
                        " (type='workflow.resumed' AND json_extract(payload, '$.decided')"
                        " IS NOT NULL) GROUP BY 1")  # an approval rides in its resume
    assert sorted(decided) == sorted((g, 1) for g in gates)
    assert sum(won.values()) == PAIRS
    print(f"\nrace: {PAIRS} pairs, {PAIRS} winners (approve {won['approved']},"
          f" reject {won['rejected']}), {PAIRS} losers told who won; {elapsed:.1f} s")
