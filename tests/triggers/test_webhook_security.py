"""Security at the webhook edge (in process, through httpx's ASGI transport): an
unauthenticated caller gets a fixed message and an error id, never a path or config text;
refused credentials are rate-limited per address and trigger (429 + Retry-After, recorded,
shown by `triggers list`); a bearer sender's Idempotency-Key makes a replay one run."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawtower.core.clock import FakeClock
from clawtower.core.events import NewEvent
from clawtower.core.experts import home
from clawtower.core.store.interface import Store, WriteTx
from clawtower.core.triggers import events as tev
from clawtower.core.triggers import hookauth, views
from clawtower.core.triggers.catalog import Catalog
from clawtower.core.triggers.ratelimit import FailureLimiter
from clawtower.core.triggers.webhook import build_app
from tests.helpers.hook_expert import SECRET, TOKEN, install_hook_expert

HOOK = "/hooks/hook-expert/inbound"
GOOD = {"event_id": "e-1", "contact_id": "c-1"}
BEARER = {"authorization": f"Bearer {TOKEN}"}


def client(app: Any, address: str = "127.0.0.1") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(address, 4000)),
                             base_url="http://t")


async def test_unauthenticated_replies_hold_no_path_version_or_config(
        store: Store, hook_home: Path, caplog: pytest.LogCaptureFixture) -> None:
    app = build_app(store, Catalog())
    body = json.dumps(GOOD).encode()
    ts = str(int(time.time()))
    tries: list[dict[str, str]] = [
        {}, {"authorization": "Bearer wrong-token-CANARY-xxxxxxxxxx"},
        {"authorization": "Basic Zm9vOmJhcg=="},
        {hookauth.TIMESTAMP_HEADER: ts, hookauth.SIGNATURE_HEADER: "sha256=00"},
        {hookauth.TIMESTAMP_HEADER: str(int(time.time()) - 9999),
         hookauth.SIGNATURE_HEADER: hookauth.sign(SECRET, "1", body)},
        {hookauth.TIMESTAMP_HEADER: "soon", hookauth.SIGNATURE_HEADER: "sha256=00"}]
    replies = []
    async with client(app) as c:
        for h in tries:
            replies.append(await c.post(HOOK, content=body, headers=h))
        too_big = await c.post(HOOK, content=b"x" * 300_000)
        # a hooks.yaml the operator broke: the reply used to hold its absolute path
        hookauth.hooks_file("hook-expert").write_text(
            "inbound: {token: CANARY-0123456789abcdef, token: x}\n")
        replies.append(await c.post(HOOK, content=body, headers=BEARER))
        hookauth.hooks_file("hook-expert").write_text("inbound: [not, a, mapping]\n")
        broken = await c.post(HOOK, content=body, headers=BEARER)
        replies.append(broken)
        replies.append(await c.post("/hooks/hook-expert/nope", content=body))
        replies.append(too_big)
        health = await c.get("/health")
    home_text = str(hook_home)
    for r in replies:
        assert r.status_code in (401, 404, 413), r.text
        assert home_text not in r.text and "hooks.yaml" not in r.text and "/home" not in r.text
        assert "server" not in {k.lower() for k in r.headers}  # no server/version header
    unauth = [r for r in replies if r.status_code == 401]
    assert len(unauth) == len(tries) + 2
    for r in unauth:
        assert set(r.json()) == {"error", "error_id"} and r.json()["error"] == "unauthorized"
    assert "262144" not in replies[-1].text  # the configured body limit is not told either
    assert "store" not in health.json() and str(store.path) not in health.text
    # the detail is in the events, under the id the caller got
    rows = await store.fetchall("SELECT error_id, reason FROM trigger_auth_failures"
                                " WHERE kind='failed' ORDER BY seq")
    assert [r["error_id"] for r in rows] == [r.json()["error_id"] for r in unauth]
    reasons = [r["reason"] for r in rows]
    assert "bad bearer token" in reasons and "bad signature" in reasons
    assert str(hookauth.hooks_file("hook-expert")) in reasons[-1]
    # secrets, presented or configured, are in neither the log nor the events
    assert "CANARY" not in caplog.text and not any("CANARY" in r for r in reasons)
    assert "bad bearer token" in caplog.text  # the log has the detail
    assert (await store.fetchone("SELECT count(*) AS n FROM trigger_items"))["n"] == 0


@pytest.mark.both_backends
async def test_failures_rate_limited_per_address_and_trigger(
        store: Store, hook_home: Path, clock: FakeClock) -> None:
    app = build_app(store, Catalog(), limiter=FailureLimiter(3, 60.0))
    bad = {"authorization": "Bearer wrong-token-xxxxxxxxxx"}
    n = 0

    def good() -> dict[str, Any]:
        nonlocal n
        n += 1
        return {"event_id": f"e-{n}", "contact_id": "c"}

    async with client(app, "10.0.0.9") as attacker, client(app, "10.0.0.5") as sender:
        codes = [(await attacker.post(HOOK, json=good(), headers=bad)).status_code
                 for _ in range(6)]
        assert codes == [401, 401, 401, 429, 429, 429]
        r = await attacker.post(HOOK, json=good(), headers=bad)
        assert r.status_code == 429 and r.headers["retry-after"] == "60"
        assert set(r.json()) == {"error"}
        # the attacker's address is locked even with the right token; nobody else is
        assert (await attacker.post(HOOK, json=good(), headers=BEARER)).status_code == 429
        assert (await sender.post(HOOK, json=good(), headers=BEARER)).status_code == 202
        # another trigger from the attacker's address has its own budget
        mail = {"message_id": "m-1", "from": "a@b.c", "contact_id": "c"}
        assert (await attacker.post("/hooks/hook-expert/mail", json=mail,
                                    headers=bad)).status_code == 401
        # 429s are not counted: the lock ends one window after the last refused credential
        clock.advance(30)
        r = await attacker.post(HOOK, json=good(), headers=bad)
        assert r.status_code == 429 and r.headers["retry-after"] == "30"
        clock.advance(30)
        assert (await attacker.post(HOOK, json=good(), headers=BEARER)).status_code == 202
    failed = await store.fetchall("SELECT kind, address, trigger FROM trigger_auth_failures"
                                  " ORDER BY seq")
    assert [(f["kind"], f["address"]) for f in failed if f["trigger"] == "inbound"] == [
        ("failed", "10.0.0.9")] * 3 + [("throttled", "10.0.0.9")]
    over = {r["trigger"]: r for r in await views.overview(store)}
    assert over["inbound"]["auth_failures_1h"] == 3
    assert over["inbound"]["auth_throttled_1h"] == 1
    assert over["mail"]["auth_failures_1h"] == 1 and over["tick"]["auth_failures_1h"] == 0
    later = await views.overview(store, now=clock.now() + 3700)
    assert {r["auth_failures_1h"] for r in later} == {0}
    assert await store.verify_projections() == []  # rebuilt from the log: the same rows


IDEM_TRIGGERS = """  - name: inbound
    type: webhook
    concurrency: parallel
    payload_mapping:
      contact_id: contact_id
    process: note
"""


async def test_idempotency_key_makes_a_bearer_replay_one_run(
        tmp_path: Path, store: Store, hook_home: Path) -> None:
    home.remove("hook-expert")
    install_hook_expert(tmp_path / "idem", triggers=IDEM_TRIGGERS)
    app = build_app(store, Catalog())
    body = {"contact_id": "c-1"}
    async with client(app) as c:
        first = await c.post(HOOK, json=body, headers={**BEARER, "Idempotency-Key": "d-1"})
        again = await c.post(HOOK, json=body, headers={**BEARER, "Idempotency-Key": "d-1"})
        other = await c.post(HOOK, json=body, headers={**BEARER, "Idempotency-Key": "d-2"})
        field1 = await c.post(HOOK, json={**body, "idempotencyKey": "f-1"}, headers=BEARER)
        field2 = await c.post(HOOK, json={**body, "idempotencyKey": "f-1"}, headers=BEARER)
        plain1 = await c.post(HOOK, json=body, headers=BEARER)
        plain2 = await c.post(HOOK, json=body, headers=BEARER)
        bad = await c.post(HOOK, json={**body, "idempotencyKey": 7}, headers=BEARER)
    assert first.json()["status"] == "queued"
    assert again.status_code == 202 and again.json()["status"] == "skipped"
    assert again.json()["duplicate_of"] == first.json()["id"]
    assert other.json()["status"] == "queued"
    assert field1.json()["status"] == "queued" and field2.json()["status"] == "skipped"
    # without a key a bearer hook is at-least-once: both copies are queued
    assert plain1.json()["status"] == plain2.json()["status"] == "queued"
    assert bad.status_code == 422 and "idempotencyKey" in bad.json()["error"]
    queued = await store.fetchall("SELECT id FROM trigger_items WHERE status='queued'")
    assert len(queued) == 5


async def fail(store: Store, lim: FailureLimiter, address: str, scope: str = "hook:e/t"
               ) -> str | None:
    """One counted refusal, as the webhook records it (the limiter's check, then the event)."""
    def write(tx: WriteTx) -> str | None:
        tripped = lim.fail(tx, scope, address)
        expert, trigger = scope.removeprefix("hook:").split("/")
        tx.emit(NewEvent(entity_id=f"hook:{scope}", actor="test", role="system",
                         payload=tev.HookAuthFailed(
                             expert=expert, trigger=trigger, address=address, reason="bad",
                             error_id="E-1", window_s=lim.window_s)))
        return tripped
    return await store.execute(write)


@pytest.mark.both_backends
async def test_the_limiter_counts_one_episode_and_keeps_one_window(
        store: Store, clock: FakeClock) -> None:
    lim = FailureLimiter(3, 10.0)
    assert [await fail(store, lim, "a") for _ in range(3)] == [None, None, "address"]
    assert await lim.retry_after(store, "hook:e/t", "a") == 10
    assert await fail(store, lim, "a") is None  # counted while locked: no new episode
    clock.advance(10.5)
    assert await lim.retry_after(store, "hook:e/t", "a") is None  # a sliding window
    for i in range(5):  # each failure drops its scope's rows that left the window
        await fail(store, lim, f"b{i}")
    rows = await store.fetchall("SELECT address FROM auth_failures ORDER BY seq")
    assert [r["address"] for r in rows] == [f"b{i}" for i in range(5)]
    assert await store.verify_projections() == []


@pytest.mark.both_backends
async def test_many_addresses_get_one_try_each_and_a_clean_sender_none_less(
        store: Store, clock: FakeClock) -> None:
    lim = FailureLimiter(3, 10.0, trigger_limit=4)
    trips = [await fail(store, lim, f"10.0.0.{i}") for i in range(4)]
    assert trips == [None, None, None, "scope"]  # 4 addresses, one failure each
    assert all([await lim.retry_after(store, "hook:e/t", f"10.0.0.{i}") == 10
                for i in range(4)])
    assert await lim.retry_after(store, "hook:e/t", "10.9.9.9") is None  # never failed
    assert await lim.retry_after(store, "hook:e/other", "10.0.0.1") is None  # other trigger
    assert await fail(store, lim, "10.0.0.5") is None  # a new address: one try...
    assert await lim.retry_after(store, "hook:e/t", "10.0.0.5") == 10  # ...then 429
    clock.advance(10.5)
    assert await lim.retry_after(store, "hook:e/t", "10.0.0.5") is None  # the window slid
