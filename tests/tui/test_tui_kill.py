"""Issue 35's "done when": the console hosts the engine as `serve` does, through a kill -9.
The real console runs headless in a child process (scripts/console_host.py); it is SIGKILLed
while trigger invocations run, and a second console on the same store finishes them: none
lost, none run twice, none waiting for an operator (scripts/kill_soak.py --host console
repeats this at random points)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawtower.core.triggers.catalog import Catalog
from clawtower.core.triggers.intake import accept
from tests.helpers.console_child import Consoled
from tests.helpers.hook_expert import install_hook_expert
from tests.triggers.serve_helpers import rows, wait_rows


async def test_kill_9_of_the_console_loses_nothing_and_runs_nothing_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("CLAWTOWER_HOME", str(home))
    install_hook_expert(tmp_path)
    # the model step takes 1 s: the kill lands inside it
    (home / "clawtower.yaml").write_text("speed: 1\ndelay_ms: [1000, 1000]\n")
    db = tmp_path / "store.db"
    from clawtower.core import open_store

    store = await open_store(db)
    try:
        spec = Catalog().get("hook-expert", "inbound")
        assert spec is not None
        ids = [str((await accept(store, spec, {"event_id": f"e-{i}", "contact_id": f"k-{i}"},
                                 "cli"))["id"]) for i in range(4)]  # four keys: in parallel
    finally:
        await store.close()

    first = Consoled(home, db)
    try:
        wait_rows(db, "SELECT run_id FROM workflow_steps WHERE status='running'"
                      " AND parent IS NULL", lambda r: len(r) >= 1, timeout=60)
    finally:
        first.kill()
    in_flight = {r["run_id"] for r in rows(db, "SELECT run_id FROM trigger_items WHERE"
                                           " status='running' AND run_id IS NOT NULL")}
    cut = rows(db, "SELECT count(*) AS n FROM workflow_steps WHERE status='running'"
                   " AND parent IS NULL")[0]["n"]
    assert in_flight and cut >= 1  # killed with runs in flight

    second = Consoled(home, db, until_idle=True)  # beside the dead one's leases
    assert second.wait(timeout=90) == 0
    items = rows(db, "SELECT id, status FROM trigger_items")
    assert {r["id"]: r["status"] for r in items} == dict.fromkeys(ids, "done")
    links = rows(db, "SELECT entity_id, count(*) AS n FROM events WHERE type='trigger.linked'"
                     " GROUP BY entity_id")
    assert {r["entity_id"]: r["n"] for r in links} == dict.fromkeys(ids, 1)  # one run each
    runs = rows(db, "SELECT status FROM workflow_runs")
    assert [r["status"] for r in runs] == ["ok"] * 4
    reruns = rows(db, "SELECT entity_id FROM events WHERE type='workflow.adopted' AND"
                      " json_extract(payload, '$.rerun')")
    assert len(reruns) == cut  # each interrupted step re-run once, by the adopter
    assert {r["entity_id"] for r in reruns} <= in_flight
    assert rows(db, "SELECT 1 FROM workflow_runs WHERE gate='interrupted'") == []
