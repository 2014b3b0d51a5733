"""`clawtower triggers list|fire|history|auth` and `clawtower deadletter list|retry|drop`:
output, --json, exit codes and one-line errors."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

from clawtower.core.store import open_store
from clawtower.core.triggers import queue as q
from tests.helpers.procs import child_env

from .serve_helpers import CLAWTOWER


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLAWTOWER), *args], capture_output=True, text=True,
                          env=child_env(CLAWTOWER_HOME=str(home), CLAWTOWER_OPERATOR="ops"),
                          timeout=120)


def test_triggers_and_deadletter_commands(tmp_path: Path, hook_home: Path) -> None:
    db = str(tmp_path / "c.db")
    r = cli(hook_home, "triggers", "fire", "hook-expert", "inbound", "--db", db,
            "--payload", '{"event_id": "e-1", "contact_id": "c-1"}', "--json")
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)
    assert first["status"] == "queued"
    r = cli(hook_home, "triggers", "fire", "hook-expert", "inbound", "--db", db,
            "--payload", '{"event_id": "e-1", "contact_id": "c-1"}')
    assert r.returncode == 0 and f"skipped (duplicate of {first['id']})" in r.stdout
    r = cli(hook_home, "triggers", "list", "--db", db, "--json")
    rows = {x["trigger"]: x for x in json.loads(r.stdout)}
    assert set(rows) == {"inbound", "mail", "tick", "chat"}
    assert rows["inbound"]["queue"] == {"c-1": {"queued": 1}}
    assert rows["tick"]["next_fire"] is not None and rows["tick"]["tz"] == "Europe/Berlin"
    assert rows["inbound"]["last"] is None  # a skipped duplicate never ran
    assert rows["inbound"]["skipped"] == 1
    r = cli(hook_home, "triggers", "list", "--db", db)
    assert "hook-expert/tick: cron 0 8 * * 1-5 Europe/Berlin, next 20" in r.stdout
    assert "  c-1: queued 1" in r.stdout
    r = cli(hook_home, "triggers", "history", "hook-expert", "--db", db, "--json")
    assert [x["status"] for x in json.loads(r.stdout)] == ["skipped", "queued"]
    # bad input: one line, exit 2 (usage/validation) or 1 (not found)
    for args, code, msg in (
            (("triggers", "fire", "hook-expert", "inbound", "--payload", "[1]"), 2,
             "--payload: must be a JSON object"),
            (("triggers", "fire", "hook-expert", "inbound", "--payload", "{}"), 2,
             "dedupe_key 'event_id'"),
            (("triggers", "fire", "hook-expert", "nope"), 2, "no such trigger"),
            (("triggers", "history", "--limit", "0"), 2,
             "--limit: must be between 1 and 10000, got 0"),
            (("triggers", "auth", "hook-expert", "tick", "--token"), 2,
             "no webhook trigger 'tick'"),
            (("deadletter", "retry", "T-nope"), 2, "no such invocation"),
            (("deadletter", "drop", first["id"]), 2, "queued, not dead-lettered")):
        r = cli(hook_home, *args, "--db", db)
        assert r.returncode == code, (args, r.stdout, r.stderr)
        assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "Traceback" not in r.stderr

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
    r = cli(hook_home, "deadletter", "list", "--db", db, "--json")
    assert [x["id"] for x in json.loads(r.stdout)] == [first["id"]]
    r = cli(hook_home, "deadletter", "list", "--db", db)
    assert f"{first['id']} " in r.stdout and "dead_letter attempt 1: boom" in r.stdout
    assert cli(hook_home, "deadletter", "retry", first["id"], "--db", db).returncode == 0
    r = cli(hook_home, "deadletter", "list", "--db", db, "--json")
    assert json.loads(r.stdout) == []
    r = cli(hook_home, "triggers", "auth", "hook-expert", "inbound", "--token")
    assert r.returncode == 0 and r.stdout.startswith("token: sha256:")
    from clawtower.core.triggers import hookauth

    assert hookauth.load("hook-expert")["inbound"].token not in r.stdout + r.stderr
    mode = (hook_home / "expert-config" / "hook-expert" / "hooks.yaml").stat().st_mode
    assert mode & 0o077 == 0  # credentials are readable by the owner only
