"""Issue 35: two real `clawtower serve` processes on one store (SQLite and PostgreSQL) share
one failure count: refused credentials split across both reach the limit together, one
throttle episode is recorded, and a restarted server still has the count."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import httpx
import pytest

from clawtower.core.store import open_store
from tests.helpers.hook_expert import TOKEN
from tests.helpers.procs import child_env

from .serve_helpers import CLAWTOWER, Served

HOOK = "/hooks/hook-expert/inbound"
BAD = {"Authorization": "Bearer wrong-token-xxxxxxxxxx"}
GOOD = {"Authorization": f"Bearer {TOKEN}"}
OPTIONS = ["--auth-failures", "4", "--auth-window", "600"]


def query(target: str, sql: str) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        s = await open_store(target)
        try:
            return await s.fetchall(sql)
        finally:
            await s.close()
    return asyncio.run(run())


def post(srv: Served, headers: dict[str, str], n: int = 1) -> httpx.Response:
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        return c.post(HOOK, json={"event_id": f"e-{n}", "contact_id": "c"}, headers=headers)


def verify(target: str, home: Any) -> None:
    r = subprocess.run([str(CLAWTOWER), "store", "verify", "--db", target],
                       env=child_env(CLAWTOWER_HOME=str(home)), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.both_backends
def test_two_servers_share_one_failure_count_and_a_restart_keeps_it(
        store_target: str, hook_home: Any) -> None:
    a = Served(hook_home, store_target, OPTIONS)  # type: ignore[arg-type]
    b = Served(hook_home, store_target, OPTIONS)  # type: ignore[arg-type]
    try:
        assert post(a, GOOD, 1).status_code == 202  # an accepted request counts nothing
        # four refused credentials, split across both: the limit (4) is reached together
        codes = [post(srv, BAD).status_code for srv in (a, b, a, b)]
        assert codes == [401] * 4
        for srv in (a, b):  # either server now answers 429 before looking at the token
            r = post(srv, GOOD, 2)
            assert r.status_code == 429, r.text
            assert 500 <= int(r.headers["retry-after"]) <= 600
    finally:
        assert a.stop() == 0 and b.stop() == 0
    kinds = [r["kind"] for r in query(store_target, "SELECT kind FROM trigger_auth_failures"
                                                    " ORDER BY seq")]
    assert kinds == ["failed"] * 4 + ["throttled"]  # one episode, whichever server saw it
    assert len(query(store_target, "SELECT seq FROM auth_failures")) == 4
    c = Served(hook_home, store_target, OPTIONS)  # type: ignore[arg-type]
    try:  # a restart forgets nothing: still locked, still nothing counted for a 429
        r = post(c, GOOD, 3)
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 500
    finally:
        assert c.stop() == 0
    assert len(query(store_target, "SELECT seq FROM auth_failures")) == 4
    assert len(query(store_target, "SELECT id FROM trigger_items")) == 1
    verify(store_target, hook_home)
