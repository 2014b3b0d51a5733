"""`serve --until-idle` never exits with a queued invocation (issue 35): the engine's
trigger worker is one of its workers, and idle means every worker is idle."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.helpers.procs import child_env

from .serve_helpers import CLAWTOWER, rows


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLAWTOWER), *args], capture_output=True, text=True,
                          env=child_env(CLAWTOWER_HOME=str(home), CLAWTOWER_OPERATOR="ops"),
                          timeout=180)


def test_fired_invocations_run_before_until_idle_exits(tmp_path: Path,
                                                       hook_home: Path) -> None:
    db = str(tmp_path / "i.db")
    ids = []
    for n, contact in enumerate(("c-1", "c-1", "c-2")):
        r = cli(hook_home, "triggers", "fire", "hook-expert", "inbound", "--db", db,
                "--payload", json.dumps({"event_id": f"e-{n}", "contact_id": contact}),
                "--json")
        assert r.returncode == 0, r.stderr
        ids.append(json.loads(r.stdout)["id"])
    r = cli(hook_home, "serve", "--until-idle", "--db", db)
    assert r.returncode == 0, r.stderr
    left = {x["id"]: x["status"] for x in rows(Path(db), "SELECT id, status FROM trigger_items")}
    assert left == dict.fromkeys(ids, "done"), (left, r.stderr)
    # and nothing of any protocol is left ready: a second run has nothing to do
    r = cli(hook_home, "serve", "--until-idle", "--db", db)
    assert r.returncode == 0, r.stderr
