"""`clawtower serve` over real HTTP: webhook authentication and hostile input, processing
through the expert's real process, cron across two servers, channel triggers, SIGTERM and
kill -9 with a loaded queue."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawtower.core.experts import home
from clawtower.core.store import open_store
from clawtower.core.triggers import hookauth
from tests.helpers.hook_expert import SECRET, TOKEN, install_hook_expert
from tests.helpers.procs import child_env

from .serve_helpers import CLAWTOWER, Served, rows, wait_rows

BEARER = {"Authorization": f"Bearer {TOKEN}"}


def signed(body: bytes, ts: float | None = None, secret: str = SECRET) -> dict[str, str]:
    t = str(int(time.time() if ts is None else ts))
    return {hookauth.TIMESTAMP_HEADER: t,
            hookauth.SIGNATURE_HEADER: hookauth.sign(secret, t, body)}


def test_webhook_auth_and_hostile_input(tmp_path: Path, hook_home: Path) -> None:
    hookauth.write("hook-expert", "inbound", max_bytes=2048)
    db = tmp_path / "s.db"
    srv = Served(hook_home, db)
    accepted: list[str] = []
    refused: list[tuple[str, str]] = []
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert c.get("/health").json()["ok"] is True
            hook = "/hooks/hook-expert/inbound"

            def post(body: bytes, headers: dict[str, str], want: int, why: str = "") -> None:
                r = c.post(hook, content=body, headers=headers)
                assert r.status_code == want, (r.status_code, r.text)
                data = r.json()
                if want == 202:
                    accepted.append(data["id"])
                elif want == 401:  # the caller is told nothing; the event says why
                    assert data["error"] == "unauthorized", data
                    refused.append((data["error_id"], why))
                else:
                    assert why in data["error"], data
                assert "server" not in r.headers

            good = json.dumps({"event_id": "e-1", "contact_id": "c-1"}).encode()
            post(good, {}, 401, "signature")
            post(good, {"Authorization": "Bearer wrong-token-xxxxxxxxxx"}, 401, "bad bearer")
            post(good, {"Authorization": "Basic Zm9vOmJhcg=="}, 401, "bad bearer")
            post(good, BEARER, 202)
            # HMAC over the raw body, with a timestamp window
            b2 = json.dumps({"event_id": "e-2", "contact_id": "c-1"}).encode()
            post(b2, signed(b2, secret="another-secret-0123456789"), 401, "bad signature")
            post(b2, signed(b2, ts=time.time() - 3600), 401, "window")
            post(b2, signed(b2, ts=time.time() + 3600), 401, "window")
            post(b2, {hookauth.TIMESTAMP_HEADER: "soon",
                      hookauth.SIGNATURE_HEADER: "sha256=00"}, 401, "unix time")
            h = signed(b2)
            post(b2, h, 202)
            post(b2, h, 401, "replayed")  # the same signed request again, inside the window
            post(b2 + b" ", h, 401, "bad signature")  # a body changed after signing
            # the body: size, JSON, UTF-8, shape, keys
            big = json.dumps({"event_id": "e-3", "contact_id": "c", "pad": "x" * 4000})
            post(big.encode(), BEARER, 413, "too large")
            r = c.post(hook, content=iter([b"{", b" " * 3000, b"}"]), headers=BEARER)
            assert r.status_code == 413  # chunked, no Content-Length
            post(b"not json", BEARER, 422, "not valid JSON")
            post(b"[1, 2]", BEARER, 422, "must be a JSON object")
            post(b'{"event_id": "a", "event_id": "b"}', BEARER, 422, "duplicate key")
            post(b'{"event_id": "\xff"}', BEARER, 422, "not UTF-8")
            post(b'{"x": NaN}', BEARER, 422, "NaN is not JSON")
            post(b"[" * 200 + b"]" * 200, BEARER, 422, "")
            post(b'{"contact_id": "c-1"}', BEARER, 422, "dedupe_key 'event_id'")
            post(b'{"event_id": "e-4"}', BEARER, 422, "concurrency_key 'contact_id'")
            post(b'{"event_id": "e-4", "contact_id": [1]}', BEARER, 422, "concurrency_key")
            # unknown expert or trigger, a cron trigger, a wrong method
            for path in ("/hooks/nope/inbound", "/hooks/hook-expert/nope",
                         "/hooks/hook-expert/tick", "/hooks/" + "x" * 300 + "/y", "/nothing"):
                r = c.post(path, content=good, headers=BEARER)
                assert r.status_code == 404 and "error" in r.json()
            assert c.get(hook).status_code == 405
            # a duplicate is acknowledged and recorded as skipped, never run
            r = c.post(hook, content=good, headers=BEARER)
            assert r.status_code == 202 and r.json()["status"] == "skipped"
            skipped = r.json()["id"]
        items = rows(db, "SELECT id, status FROM trigger_items ORDER BY seq")
        assert [i["id"] for i in items] == [*accepted, skipped]  # nothing else was stored
        reasons = {r["error_id"]: r["reason"] for r in rows(
            db, "SELECT error_id, reason FROM trigger_auth_failures WHERE kind='failed'")}
        assert len(reasons) == len(refused)
        for eid, why in refused:
            assert why in reasons[eid], (why, reasons[eid])
        done = wait_rows(db, "SELECT id, run_id FROM trigger_items WHERE status='done'",
                         lambda r: len(r) == 2)
        runs = rows(db, "SELECT id, status FROM workflow_runs")
        assert sorted(r["run_id"] for r in done) == sorted(r["id"] for r in runs)
        assert all(r["status"] == "ok" for r in runs)
        assert rows(db, "SELECT status FROM trigger_items WHERE id=?", (skipped,)) == [
            {"status": "skipped"}]
    finally:
        assert srv.stop() == 0
    assert "Traceback" not in "".join(srv.err)


def _post_many(url: str, n: int, keys: int, start: int = 0) -> list[str]:
    async def go() -> list[str]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            ids = []
            for i in range(start, start + n):
                r = await c.post("/hooks/hook-expert/inbound", headers=BEARER, json={
                    "event_id": f"e-{i}", "contact_id": f"k-{i % keys}"})
                assert r.status_code == 202, r.text
                ids.append(r.json()["id"])
            return ids
    return asyncio.run(go())


@pytest.mark.parametrize("idempotent", [False, True])
def test_kill_9_with_a_loaded_queue_loses_nothing_and_runs_nothing_twice(
        tmp_path: Path, hook_home: Path, idempotent: bool) -> None:
    if idempotent:  # re-running a step is safe: an interrupted one is retried at once
        home.remove("hook-expert")
        install_hook_expert(tmp_path / "idem", extra="execution:\n  idempotent: true\n")
    db = tmp_path / "k.db"
    srv = Served(hook_home, db)
    ids = _post_many(srv.url, 24, 4)
    # kill -9 once some have run and others are in flight or queued
    wait_rows(db, "SELECT id FROM trigger_items WHERE status='done'", lambda r: len(r) >= 3)
    srv.kill()
    before = {r["id"]: r["status"] for r in rows(db, "SELECT id, status FROM trigger_items")}
    assert set(before) == set(ids)
    assert any(s != "done" for s in before.values())
    in_flight = {r["run_id"] for r in rows(db, "SELECT run_id FROM trigger_items WHERE"
                                            " status='running' AND run_id IS NOT NULL")}
    cut = rows(db, "SELECT count(*) AS n FROM workflow_steps WHERE status='running'"
                   " AND parent IS NULL")[0]["n"]  # steps the kill landed inside
    srv2 = Served(hook_home, db)
    try:
        ids += _post_many(srv2.url, 8, 4, start=24)
        # hook-expert's steps (a model step, the compiler's `finish`) have no outside
        # effect: the compiler marks them x-idempotent, so a run killed inside one is
        # adopted and re-runs it, with or without the package's `idempotent: true`; nothing
        # waits for the operator (issue 22). A step that may have had its effect would.
        def settled_(r: list[dict[str, Any]]) -> bool:
            held = {i["lane"] for i in r if i["status"] == "paused"}
            return len(r) == 32 and all(i["status"] in ("done", "paused") or (
                i["status"] == "queued" and i["lane"] in held) for i in r)

        settled = wait_rows(db, "SELECT t.id, t.lane, t.status, t.run_id, r.gate FROM"
                            " trigger_items t LEFT JOIN workflow_runs r ON r.id = t.run_id",
                            settled_, timeout=300)
        waiting = [i for i in settled if i["status"] == "paused"]
        assert waiting == []
        wait_rows(db, "SELECT id FROM trigger_items WHERE status='done'",
                  lambda r: len(r) == 32, timeout=300)
    finally:
        assert srv2.stop() == 0
    links = rows(db, "SELECT entity_id, count(*) AS n FROM events WHERE type='trigger.linked'"
                     " GROUP BY entity_id")
    assert {r["entity_id"]: r["n"] for r in links} == dict.fromkeys(ids, 1)  # one run each
    runs = rows(db, "SELECT status FROM workflow_runs")
    assert len(runs) == 32 and all(r["status"] == "ok" for r in runs)
    verify = subprocess.run([str(CLAWTOWER), "store", "verify", "--db", str(db)],
                            capture_output=True, text=True, timeout=120,
                            env=child_env(CLAWTOWER_HOME=str(hook_home)))
    assert verify.stdout == "projections match the log\n", verify.stderr  # queue = its log
    assert rows(db, "SELECT actor FROM events WHERE type='workflow.recovered'") == []
    reruns = rows(db, "SELECT entity_id FROM events WHERE type='workflow.adopted' AND"
                      " json_extract(payload, '$.rerun')")
    assert len(reruns) == cut  # each interrupted step re-run once, by the adopter
    assert {r["entity_id"] for r in reruns} <= in_flight
    # per key: each invocation claimed only after the one before it (arrival order) ended
    items = rows(db, "SELECT id, lane, seq, started_at, ended_at FROM trigger_items"
                     " ORDER BY lane, seq")
    for a, b in itertools.pairwise(items):
        if a["lane"] == b["lane"]:
            first_claim = rows(db, "SELECT min(ts) AS t FROM events WHERE entity_id=? AND"
                                   " type='trigger.claimed'", (b["id"],))[0]["t"]
            assert first_claim >= a["ended_at"] - 1e-6, (a, b)


def test_no_engine_runs_the_webhook_server_only(tmp_path: Path, hook_home: Path) -> None:
    """`serve --no-engine`: webhooks are accepted into the store and nothing here runs them
    (a console on the store does: tests/tui/test_tui_kill.py); SIGTERM exits 0."""
    db = tmp_path / "n.db"
    srv = Served(hook_home, db, ["--no-engine"])
    try:
        ids = _post_many(srv.url, 3, 3)
    finally:
        assert srv.stop() == 0
    left = rows(db, "SELECT id, status FROM trigger_items")
    assert {r["id"]: r["status"] for r in left} == dict.fromkeys(ids, "queued")
    assert rows(db, "SELECT id FROM workflow_runs") == []
    refused = subprocess.run([str(CLAWTOWER), "serve", "--db", str(db), "--no-engine",
                              "--until-idle"], capture_output=True, text=True, timeout=120,
                             env=child_env(CLAWTOWER_HOME=str(hook_home)))
    assert refused.returncode == 2 and "--no-engine runs the webhook server only" in \
        refused.stderr


def test_sigterm_drains_in_flight_runs_and_keeps_what_is_queued(
        tmp_path: Path, hook_home: Path) -> None:
    db = tmp_path / "t.db"
    srv = Served(hook_home, db)
    ids = _post_many(srv.url, 6, 2)
    assert srv.stop() == 0  # SIGTERM: a clean exit; runs in flight finish first
    left = rows(db, "SELECT id, status FROM trigger_items")
    assert {r["id"] for r in left} == set(ids)
    assert not any(r["status"] in ("escalated", "running") for r in left), left
    srv = Served(hook_home, db)
    try:
        wait_rows(db, "SELECT id FROM trigger_items WHERE status='done'", lambda r: len(r) == 6)
    finally:
        assert srv.stop() == 0
    links = rows(db, "SELECT entity_id, count(*) AS n FROM events WHERE type='trigger.linked'"
                     " GROUP BY entity_id")
    assert {r["entity_id"]: r["n"] for r in links} == dict.fromkeys(ids, 1)


def test_cron_fires_once_per_time_with_two_servers(tmp_path: Path, hook_home: Path) -> None:
    home.remove("hook-expert")
    install_hook_expert(tmp_path / "cron", cron="*/2 * * * * *")
    db = tmp_path / "c.db"
    a = Served(hook_home, db)
    b = Served(hook_home, db)
    try:
        fires = wait_rows(db, "SELECT payload FROM trigger_items WHERE trigger='tick'",
                          lambda r: len(r) >= 3, timeout=90)
    finally:
        assert a.stop() == 0 and b.stop() == 0
    fired = rows(db, "SELECT json_extract(payload, '$.fired_at') AS t FROM trigger_items"
                     " WHERE trigger='tick'")
    times = [r["t"] for r in fired]
    assert len(times) == len(set(times)) >= 3  # never two invocations for one time
    assert all(t % 2 == 0 for t in times)  # on the schedule (every 2 s)
    assert fires


def test_channel_message_starts_the_process(tmp_path: Path, hook_home: Path) -> None:
    db = tmp_path / "ch.db"
    srv = Served(hook_home, db)

    async def send() -> None:
        from clawtower.core.sessions.service import Sessions

        store = await open_store(str(db))
        try:
            s = Sessions(store)
            sid = await s.create(channel="cli")
            await s.send(sid, "hello there", sender="ann")
            await s.send(sid, "URGENT: the site is down", sender="ann")
            other = await s.create(channel="internal")
            await s.send(other, "urgent but elsewhere", sender="bob")
        finally:
            await store.close()

    try:
        # a store's first server scans from the end of the log: wait until its channel
        # watcher has taken its position, or the messages may predate it (a loaded machine)
        wait_rows(db, "SELECT seq FROM trigger_cursor WHERE name='channels'",
                  lambda r: len(r) == 1)
        asyncio.run(send())
        done = wait_rows(db, "SELECT * FROM trigger_items WHERE trigger='chat' AND"
                             " status='done'", lambda r: len(r) == 1)
    finally:
        assert srv.stop() == 0
    item = done[0]
    payload = json.loads(item["payload"])
    assert payload["message_text"] == "URGENT: the site is down"
    assert payload["sender_id"] == "ann" and payload["channel_name"] == "cli"
    assert json.loads(item["inputs"]) == {"contact_id": "ann"}
    assert item["lane"] == "hook-expert/chat/key:ann"
    assert len(rows(db, "SELECT id FROM trigger_items WHERE trigger='chat'")) == 1


def test_an_explicit_port_in_use_is_one_line_and_exit_1(tmp_path: Path, hook_home: Path) -> None:
    """uvicorn ends a failed bind with sys.exit(3): it was a traceback and exit 3."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = subprocess.run([str(CLAWTOWER), "serve", "--db", str(tmp_path / "p.db"), "--port",
                            str(port)], capture_output=True, text=True, timeout=60,
                           env=child_env(CLAWTOWER_HOME=str(hook_home)))
    assert r.returncode == 1, r.stderr
    assert f"clawtower: the webhook server could not start on 127.0.0.1:{port} (port in use?)" \
        in r.stderr
    assert "Traceback" not in r.stderr
