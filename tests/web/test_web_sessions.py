"""Issue 35: the web console's sessions and refused tokens are the store's (over real HTTP,
no browser): a signed-in cookie still works after the server restarts on the same store, a
rotated token's sessions end (recorded), the failure count survives the restart, and the
store holds only the cookie's SHA-256."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from conftest import CLAWTOWER, OPERATOR, Web, _env, launched, query, wait_for

pytestmark = pytest.mark.xdist_group("web-console")


def client() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


def restart(web: Web, *args: str) -> Web:
    """Stop `web` (SIGTERM) and start another server on the same home and store."""
    web.proc.send_signal(signal.SIGTERM)
    assert web.proc.wait(timeout=30) == 0
    return launch(web.home, *args)


def launch(home: Path, *args: str) -> Web:
    argv = [str(CLAWTOWER), "console", "--web", "--port", "0", "--by", OPERATOR, *args]
    proc = subprocess.Popen(argv, env=_env(home), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=str(home.parent))
    again = Web(proc, home, "", None)
    threading.Thread(target=again.read, daemon=True).start()
    return launched(again, "the web console to start again")


def stop(web: Web) -> None:
    if web.proc.poll() is None:
        web.proc.send_signal(signal.SIGTERM)
        assert web.proc.wait(timeout=30) == 0


def verify(db: Path, web: Web) -> None:
    r = subprocess.run([str(CLAWTOWER), "store", "verify", "--db", str(db)],
                       env=_env(web.home), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


async def test_a_session_and_the_failure_count_survive_a_restart_and_rotation_ends_it(
        start_web: Callable[..., Web], monkeypatch: pytest.MonkeyPatch) -> None:
    first = start_web("--auth-failures", "3", "--auth-window", "600")
    assert first.link is not None
    async with client() as http:
        async with http.get(first.link, allow_redirects=False) as r:
            assert r.status == 303
            cookie = r.cookies["clawtower_session"].value
        for _ in range(2):  # two refused tokens on the first server
            async with http.post(first.base + "/login", data={"token": "ct_guess"},
                                 allow_redirects=False) as r:
                assert r.status == 401
    (row,) = query(first.db, "SELECT sid_sha256, operator FROM console_sessions")
    assert row == (hashlib.sha256(cookie.encode()).hexdigest(), OPERATOR)
    events = query(first.db, "SELECT payload FROM events WHERE entity='console'")
    assert events and not any(cookie in p for (p,) in events)  # never the cookie itself
    web = restart(first, "--auth-failures", "3", "--auth-window", "600")
    try:
        jar = {"clawtower_session": cookie}
        async with aiohttp.ClientSession(cookies=jar) as http, \
                http.get(web.base + "/", allow_redirects=False) as r:
            assert r.status == 200, await r.text()  # still signed in after the restart
            assert "starting your console as alice" in await r.text()
        async with client() as other:  # the third refused token, counted with the first two
            async with other.post(web.base + "/login", data={"token": "ct_guess"},
                                  allow_redirects=False) as r:
                assert r.status == 401
            async with other.post(web.base + "/login", data={"token": "ct_guess"},
                                  allow_redirects=False) as r:
                assert r.status == 429 and 500 <= int(r.headers["Retry-After"]) <= 600
        monkeypatch.setenv("CLAWTOWER_HOME", str(web.home))
        from clawtower.core import console_tokens

        console_tokens.issue(OPERATOR)  # a rotation ends the session at its next request
        async with aiohttp.ClientSession(cookies=jar) as http, \
                http.get(web.base + "/", allow_redirects=False) as r:
            assert r.status == 401
        wait_for(lambda: any("session ended: its token was rotated" in x
                             for x in web.lines()), 10, "the ended session in the log")
    finally:
        stop(web)
    assert query(web.db, "SELECT count(*) FROM console_sessions") == [(0,)]
    assert query(web.db, "SELECT count(*) FROM events WHERE type='console.signed_out'") \
        == [(1,)]
    verify(web.db, web)


async def test_a_store_that_does_not_answer_is_a_503_not_a_500(tmp_path: Path) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from clawtower.core.store import open_store
    from clawtower.tui.web import WebConsole

    store = await open_store(str(tmp_path / "s.db"))
    lines: list[str] = []
    server = WebConsole(["true"], store, say=lines.append)
    await store.close()  # sessions and the failure window cannot be read now
    async with TestClient(TestServer(await server._make_app())) as http:
        r = await http.get("/", cookies={"clawtower_session": "x" * 43})
        assert r.status == 503 and "not answering" in await r.text()
        r = await http.post("/login", data={"token": "ct_guess"})
        assert r.status == 503 and "ct_guess" not in await r.text()
    assert any("the store did not answer" in line for line in lines)


async def test_sessions_on_postgresql_survive_a_restart(tmp_path: Path, pg_url: str) -> None:
    """The same over a PostgreSQL store (`--db postgresql://...`), no demo needed: `/` with
    the cookie is the console page again after the restart."""
    home = tmp_path / "home"
    home.mkdir()
    web = launch(home, "--db", pg_url)
    try:
        assert web.link is not None
        async with client() as http, http.get(web.link, allow_redirects=False) as r:
            assert r.status == 303
            cookie = r.cookies["clawtower_session"].value
        web = restart(web, "--db", pg_url)
        async with aiohttp.ClientSession(cookies={"clawtower_session": cookie}) as http, \
                http.get(web.base + "/", allow_redirects=False) as r:
            assert r.status == 200, await r.text()
            assert "starting your console as alice" in await r.text()
    finally:
        stop(web)
    r = subprocess.run([str(CLAWTOWER), "store", "verify", "--db", pg_url], env=_env(home),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
