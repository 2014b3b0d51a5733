"""Race N `clawtower approve ID` / `clawtower reject ID` pairs as real processes on one store
and count how many pairs had both commands exit 0 (the bug) or exactly one (the fix).

    .venv/bin/python scripts/race_decisions.py [--src TREE] [--pairs N] [--at-once K]

`--src` runs the CLI from another source tree (e.g. an export of `main`) to measure the
figure before a change; the README's "Racing decisions" figures come from this script.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

GATE = "steps:\n  - id: ship\n    approval: Ship it?\n"


async def _gates(db: Path, flow: Path, n: int) -> list[str]:
    from clawtower.core.store import open_store
    from clawtower.core.workflows.service import Workflows

    store = await open_store(db)
    try:
        wf = Workflows(store, env={}, cwd=str(flow.parent))
        return [str((await wf.run(str(flow)))["requiresApproval"]["approvalId"])
                for _ in range(n)]
    finally:
        await store.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", default=str(Path(__file__).resolve().parents[1]))
    p.add_argument("--pairs", type=int, default=100)
    p.add_argument("--at-once", type=int, default=10)
    a = p.parse_args()
    sys.path.insert(0, a.src)
    tmp = Path(tempfile.mkdtemp(prefix="clawtower-race-"))
    db, flow = tmp / "race.db", tmp / "gate.lobster"
    flow.write_text(GATE)
    ids = asyncio.run(_gates(db, flow, a.pairs))
    code = (f"import sys; sys.path.insert(0, {a.src!r}); from clawtower.cli.main import main;"
            " sys.exit(main())")
    env = dict(os.environ, CLAWTOWER_HOME=str(tmp / "home"), CLAWTOWER_OPERATOR="race")
    both = one = neither = 0
    for i in range(0, len(ids), a.at_once):
        pairs = [[subprocess.Popen([sys.executable, "-c", code, verb, aid, "--by", who,
                                    "--db", str(db)], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
                  for verb, who in (("approve", "alice"), ("reject", "bob"))]
                 for aid in ids[i:i + a.at_once]]
        for pair in pairs:
            for proc in pair:
                proc.communicate(timeout=120)
            codes = [proc.returncode for proc in pair]
            ok = sum(c == 0 for c in codes)
            both += ok == 2
            one += ok == 1
            neither += ok == 0
    print(f"{a.src}: {a.pairs} pairs ({a.at_once} at a time): both exited 0 in {both},"
          f" exactly one in {one}, neither in {neither}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
