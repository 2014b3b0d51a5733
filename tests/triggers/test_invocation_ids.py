"""Trigger invocation ids have a prefix of their own, `I-` (issue 39, trap 7): `T-` names
tasks. Stores written before keep their `T-<hex>` invocation ids, which every command that
takes an invocation id still takes; `task show T-<hex>` of one says what it is. `triggers
list`'s "last" is the last invocation that ran, never a skipped duplicate (those are
counted on their own)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from clawtower.core.store import open_store
from clawtower.core.triggers import queue as q
from clawtower.core.triggers.catalog import Catalog
from clawtower.core.triggers.intake import accept_prepared_in

from .test_cli import cli

OLD = "T-f695c0ffee123456"


def _seed_old_form(db: str) -> None:
    """An invocation as stores written before the `I-` prefix hold it."""
    async def go() -> None:
        spec = Catalog().get("hook-expert", "inbound")
        assert spec is not None
        p = q.prepare(spec, {"event_id": "e-old", "contact_id": "c-9"}, "manual")
        p.item_id = OLD
        store = await open_store(db)
        try:
            await store.execute(lambda tx: accept_prepared_in(tx, p))
        finally:
            await store.close()

    asyncio.run(go())


def test_new_invocations_are_I_and_old_T_ids_still_work(tmp_path: Path,
                                                         hook_home: Path) -> None:
    db = str(tmp_path / "c.db")
    r = cli(hook_home, "triggers", "fire", "hook-expert", "inbound", "--db", db,
            "--payload", '{"event_id": "e-1", "contact_id": "c-1"}', "--json")
    assert r.returncode == 0, r.stderr
    new = json.loads(r.stdout)["id"]
    assert new.startswith("I-") and len(new) == 18, new
    _seed_old_form(db)
    for iid in (new, OLD):
        r = cli(hook_home, "triggers", "show", iid, "--db", db, "--json")
        assert r.returncode == 0, r.stderr
        assert [x["id"] for x in json.loads(r.stdout)] == [iid]
        # taken as an invocation id: refused only for its state
        r = cli(hook_home, "deadletter", "retry", iid, "--db", db)
        assert r.returncode == 2 and "queued, not dead-lettered" in r.stderr, r.stderr
    r = cli(hook_home, "task", "show", OLD, "--db", db)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"clawtower: error: {OLD}: a trigger invocation (old id form), not a task; see"
        f" clawtower triggers show {OLD}"]
    r = cli(hook_home, "task", "show", "T-9", "--db", db)
    assert r.returncode == 2 and "no such task" in r.stderr


def test_last_is_the_last_invocation_that_ran(tmp_path: Path, hook_home: Path) -> None:
    db = str(tmp_path / "c.db")
    fire = ("triggers", "fire", "hook-expert", "inbound", "--db", db, "--payload",
            '{"event_id": "e-1", "contact_id": "c-1"}', "--json")
    first = json.loads(cli(hook_home, *fire).stdout)["id"]
    dup = json.loads(cli(hook_home, *fire).stdout)
    assert dup["status"] == "skipped" and dup["duplicate_of"] == first

    async def dead_letter() -> None:
        store = await open_store(db)
        try:
            got = await store.execute(lambda tx: q.claim_in(tx, "w", 1))
            await store.execute(lambda tx: q.fail_in(
                tx, got[0]["id"], 1, "w", error="boom", run_id=None, retry_delay=None,
                action="dead_letter", execution_log={}))
        finally:
            await store.close()

    asyncio.run(dead_letter())
    rows = {x["trigger"]: x for x in json.loads(
        cli(hook_home, "triggers", "list", "--db", db, "--json").stdout)}
    assert rows["inbound"]["last"]["id"] == first
    assert rows["inbound"]["last"]["status"] == "dead_letter"
    assert rows["inbound"]["skipped"] == 1
    r = cli(hook_home, "triggers", "list", "--db", db)
    line = next(x for x in r.stdout.splitlines() if x.startswith("hook-expert/inbound:"))
    assert f"last dead_letter {first}; skipped duplicates 1" in line, line
