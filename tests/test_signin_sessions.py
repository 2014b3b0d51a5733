"""Issue 35: the web console's sessions in the store (core/signin), on both backends: only
the cookie's SHA-256 is kept, a session expires, a sign-out ends it, expired ones are
dropped by a later sign-in, refused tokens count in the shared window, and the projections
rebuild to what was live."""

from __future__ import annotations

import pytest

from clawtower.core.clock import FakeClock
from clawtower.core.signin import sessions
from clawtower.core.store.interface import Store
from clawtower.core.triggers.ratelimit import FailureLimiter


@pytest.mark.both_backends
async def test_sessions_live_in_the_store_hashed(store: Store, clock: FakeClock) -> None:
    sid, s = await sessions.sign_in(store, "alice", "a" * 64, 100.0, "link")
    assert s.sid_sha256 == sessions.sid_hash(sid) != sid
    got = await sessions.lookup(store, sid)
    assert got is not None and (got.operator, got.token_sha256) == ("alice", "a" * 64)
    assert await sessions.lookup(store, sid + "x") is None
    rows = await store.fetchall("SELECT payload FROM events WHERE entity='console'")
    assert not any(sid in str(r["payload"]) for r in rows)  # never the cookie value
    sid2, s2 = await sessions.sign_in(store, "bob", "b" * 64, 300.0, "form")
    await sessions.sign_out(store, s2, "its token was rotated")
    assert await sessions.lookup(store, sid2) is None
    clock.advance(101)
    assert await sessions.lookup(store, sid) is None  # expired
    await sessions.sign_in(store, "carol", "c" * 64, 100.0, "form")  # drops the expired one
    left = await store.fetchall("SELECT operator FROM console_sessions")
    assert [r["operator"] for r in left] == ["carol"]
    assert await store.verify_projections() == []


@pytest.mark.both_backends
async def test_refused_tokens_count_in_the_shared_window(store: Store, clock: FakeClock
                                                          ) -> None:
    lim = FailureLimiter(2, 30.0)
    assert await sessions.refused(store, lim, "10.0.0.1", "unknown token") is None
    assert await sessions.throttled(store, lim, "10.0.0.1") is None
    assert await sessions.refused(store, lim, "10.0.0.1", "unknown token") == "address"
    assert await sessions.throttled(store, lim, "10.0.0.1") == 30
    assert await sessions.throttled(store, lim, "10.0.0.2") is None
    # the console's window is its own: a webhook trigger's address is not locked by it
    assert await lim.retry_after(store, "hook:e/t", "10.0.0.1") is None
    clock.advance(31)
    assert await sessions.throttled(store, lim, "10.0.0.1") is None
    assert await store.verify_projections() == []


async def test_the_console_events_read_as_sentences(store: Store) -> None:
    from clawtower.core.describe import event_summary

    sid, s = await sessions.sign_in(store, "alice", "a" * 64, 100.0, "link")
    await sessions.sign_out(store, s, "its token was rotated")
    await sessions.refused(store, FailureLimiter(), "10.0.0.1", "unknown token")
    lines = [event_summary(e) for e in await store.events_after(0)]
    assert lines == [
        f"alice signed in to the web console (by link; session {s.sid_sha256[:12]})",
        f"alice's web console session {s.sid_sha256[:12]} ended: its token was rotated",
        "web console sign-in from 10.0.0.1 refused: unknown token"]
    assert not any(sid in line for line in lines)
