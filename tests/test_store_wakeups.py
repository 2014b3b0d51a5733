"""Wake-ups across processes without polling: a commit in one process wakes a waiter in
another at once (SQLite: the wake channel; PostgreSQL: LISTEN/NOTIFY). The safety-net poll
is pushed out to 60 s here, so only the signal can wake the waiter in time."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest
from procs import child_env

from clawtower.core.store import open_store

CHILD = textwrap.dedent("""
    import asyncio, sys
    from clawtower.core import events as ev
    from clawtower.core.events import NewEvent
    from clawtower.core.store import open_store

    async def main():
        store = await open_store(sys.argv[1])
        for line in sys.stdin:  # one append per line the parent sends
            await store.append([NewEvent(entity_id="n-1", actor="child", role="system",
                                         payload=ev.Note(text=line.strip()))])
            print("ok", flush=True)
        await store.close()

    asyncio.run(main())
""")


@pytest.mark.both_backends
async def test_a_commit_in_another_process_wakes_a_waiter_at_once(store, store_target):
    if hasattr(store, "safety_poll_s"):
        store.safety_poll_s = store.poll_s = 60.0
    else:  # PostgreSQL: wait until LISTEN is live, or the first NOTIFY could be missed
        await asyncio.wait_for(store.listening.wait(), 30)
    child = subprocess.Popen([sys.executable, "-c", CHILD, store_target], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        loop = asyncio.get_running_loop()
        for i in range(5):
            seq = await store.last_seq()
            waiter = asyncio.create_task(store.wait_for_change(seq, 60.0))
            await asyncio.sleep(0.05)  # the waiter is parked (and on SQLite has bound)
            if hasattr(store, "safety_poll_s"):
                assert store._wake.listening
            t0 = loop.time()
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(f"note {i}\n")
            child.stdin.flush()
            assert await asyncio.wait_for(waiter, 30) == seq + 1
            # generous for a loaded machine, far below the 60 s safety net
            assert loop.time() - t0 < 20
            assert (await store.events_after(seq))[0].payload.text == f"note {i}"
            await asyncio.to_thread(child.stdout.readline)
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(60)
    assert child.returncode == 0


async def test_a_closed_store_leaves_no_wake_socket(db_path):
    from clawtower.core.store.notify import channel_dir

    store_target = str(db_path)
    s = await open_store(store_target)
    await s.wait_for_change(0, 0.01)
    folder = channel_dir(store_target)
    assert len(list(folder.iterdir())) == 1
    other = await open_store(store_target)  # a second listener on the same file
    await other.wait_for_change(0, 0.01)
    assert len(list(folder.iterdir())) == 2
    await s.close()
    assert len(list(folder.iterdir())) == 1  # the other's socket, and its folder, stay
    await other.close()
    assert not folder.exists()  # the last one leaves no folder behind in the temp folder
    again = await open_store(store_target)  # and a later listener makes it again
    await again.wait_for_change(0, 0.01)
    assert len(list(folder.iterdir())) == 1
    await again.close()
