"""`serve --until-idle` never exits with a queued invocation (issue 35): the engine's
trigger worker is one of its workers, and idle means every worker is idle."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from clawtower.core.store.interface import Store
from clawtower.core.triggers import queue as q
from clawtower.core.triggers.background import TriggerWorkers
from clawtower.core.triggers.catalog import Catalog
from clawtower.core.triggers.intake import accept
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


async def test_idle_means_no_invocation_can_move_without_a_human(
        hook_home: Path, wall_store: Store) -> None:
    """Queued or running: not idle. Paused at a gate, and what waits behind it in its lane:
    idle (a human moves it)."""
    store = wall_store
    spec = Catalog().get("hook-expert", "inbound")
    assert spec is not None
    a = (await accept(store, spec, {"event_id": "a", "contact_id": "c-1"}, "cli"))["id"]
    b = (await accept(store, spec, {"event_id": "b", "contact_id": "c-1"}, "cli"))["id"]
    c = (await accept(store, spec, {"event_id": "c", "contact_id": "c-2"}, "cli"))["id"]
    triggers = TriggerWorkers(store)
    assert not await triggers.idle()  # queued
    claimed = await store.execute(lambda tx: q.claim_in(tx, "w", 10))
    assert sorted(x["id"] for x in claimed) == sorted([a, c])  # the heads of their lanes
    assert not await triggers.idle()  # running
    await store.execute(lambda tx: q.pause_in(tx, a, "W-404", 1, "w"))
    assert not await triggers.idle()  # c still runs
    await store.execute(lambda tx: q.finish_in(tx, c, 1, "w", run_id=None, output=None,
                                               delivery={}, elapsed_s=0.1, sla_breach=None))
    assert await triggers.idle()  # a waits at its gate, b behind it in its lane
    assert (await store.fetchone("SELECT status FROM trigger_items WHERE id=?",
                                 (b,)))["status"] == "queued"  # type: ignore[index]
