"""kill -9 during memory writes (issue 25, done-when): a memory write is ONE event appended
in one commit together with its projection rows and FTS index row, so a killed writer
leaves each memory stored once or not at all, and the index agrees with the log."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from procs import ROOT, child_env

from clawtower.core.memory.service import Memories
from clawtower.core.store import open_store

WRITER = """
import asyncio, sys
from clawtower.core.store import open_store
from clawtower.core.memory.service import Memories

async def main():
    store = await open_store(sys.argv[1])
    mem = Memories(store)
    i = 0
    while True:
        await mem.put("agent:a", f"k{i}", f"fact number {i} about the kill test", by="w")
        i += 1
        if i == 20:
            print("going", flush=True)

asyncio.run(main())
"""


def test_kill_9_mid_write_leaves_each_memory_once_or_not_at_all(tmp_path: Path) -> None:
    db = str(tmp_path / "db.sqlite")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, db], stdout=subprocess.PIPE,
                            text=True, env=child_env(), cwd=ROOT)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "going"
        time.sleep(0.3)  # mid-stream of writes
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    async def check() -> None:
        store = await open_store(db)
        try:
            events = await store.fetchall(
                "SELECT entity_id, count(*) AS n FROM events WHERE type='memory.stored'"
                " GROUP BY entity_id")
            assert len(events) >= 20 and all(e["n"] == 1 for e in events)
            rows = await Memories(store).listing("agent:a")
            assert {f"agent:a/{r['key']}" for r in rows} == {e["entity_id"] for e in events}
            fts = await store.fetchall("SELECT count(*) AS n FROM memory_fts")
            assert fts[0]["n"] == len(rows)
            assert await store.verify_projections() == []
            last = max(int(r["key"][1:]) for r in rows)
            hit = await Memories(store).search(["agent:a"], f"number {last}", k=1)
            assert hit and hit[0]["key"] == f"k{last}"
        finally:
            await store.close()

    asyncio.run(check())
