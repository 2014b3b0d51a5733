"""The web console's doors and limits over real HTTP and websockets (no browser): nothing
spawned before sign-in, failed sign-ins throttled, the cap, idle consoles closed, one
console's crash leaving the others and the store alone, rotation ending sessions."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from conftest import CLAWTOWER, ROOT, Web, alive, headless_demo, query, wait_for

pytestmark = pytest.mark.xdist_group("web-console")

WS = "/ws?width=100&height=30"


def client() -> aiohttp.ClientSession:
    # unsafe: keep cookies of an IP address (127.0.0.1), as a browser does
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def sign_in(web: Web, http: aiohttp.ClientSession) -> str:
    """Exchange the printed link for the session cookie; the token (for Bearer tests)."""
    assert web.link is not None
    token = web.link.split("?token=", 1)[1]
    async with http.get(web.link, allow_redirects=False) as r:
        assert r.status == 303 and r.headers["Location"] == "/"
        assert "clawtower_session" in r.cookies
    return token


async def screen_until(ws: aiohttp.ClientWebSocketResponse, *texts: str,
                       timeout: float = 90) -> str:
    """Read until every one of `texts` has shown, in the raw stream or with its escape
    sequences removed (a loaded machine's repaints may put a style change inside a line)."""
    seen = ""

    def missing() -> bool:
        plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen)
        return any(t not in seen and t not in plain for t in texts)

    async with asyncio.timeout(timeout):
        while missing():
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.BINARY:
                seen += msg.data.decode("utf-8", "replace")
            elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                raise AssertionError(f"closed before {texts!r}")
    return seen


async def until_closed(ws: aiohttp.ClientWebSocketResponse, timeout: float) -> None:
    """Read until the server closes the socket (what a browser sees when its console ends)."""
    async with asyncio.timeout(timeout):
        while (await ws.receive()).type not in (aiohttp.WSMsgType.CLOSE,
                                                aiohttp.WSMsgType.CLOSED):
            pass


async def test_nothing_spawns_before_sign_in_even_100_at_once(
        start_web: Callable[..., Web]) -> None:
    web = start_web()
    async with client() as http:
        async def one(i: int) -> int:
            headers = {"Authorization": "Bearer ct_wrong"} if i % 2 else {}
            if i % 3 == 0:
                headers["Cookie"] = "clawtower_session=forged"
            try:
                async with http.ws_connect(web.base + WS, headers=headers):
                    return 101
            except aiohttp.WSServerHandshakeError as exc:
                return exc.status
        codes = await asyncio.gather(*(one(i) for i in range(100)))
    assert set(codes) <= {401, 429} and codes.count(401) >= 20, codes
    assert web.consoles() == []


async def test_failed_sign_ins_are_throttled_before_the_token_is_checked(
        start_web: Callable[..., Web]) -> None:
    web = start_web("--auth-failures", "3")
    assert web.link is not None
    good = web.link.split("?token=", 1)[1]
    async with client() as http:
        for _ in range(3):
            async with http.post(web.base + "/login", data={"token": "ct_guess"},
                                 allow_redirects=False) as r:
                assert r.status == 401
                body = await r.text()
                assert "not accepted" in body and "aiohttp" not in body
                assert "Server" not in r.headers
        # past the limit even the right token is not looked at
        async with http.post(web.base + "/login", data={"token": good},
                             allow_redirects=False) as r:
            assert r.status == 429 and 1 <= int(r.headers["Retry-After"]) <= 60
        async with http.get(web.base + "/", headers={"Authorization": f"Bearer {good}"},
                            allow_redirects=False) as r:
            assert r.status == 429
    wait_for(lambda: sum("refused a sign-in" in line for line in web.lines()) == 3, 10,
             "three refusals in the server's log")
    # the link (printed once, at start) is the only place the token ever shows
    assert [line for line in web.lines() if good in line] == [web.link]
    assert not any("ct_guess" in line for line in web.lines())
    assert web.consoles() == []


async def test_the_cap_holds_under_100_signed_in_connections_at_once(
        start_web: Callable[..., Web]) -> None:
    web = start_web("--max-consoles", "2")
    async with client() as http:
        await sign_in(web, http)
        opened: list[aiohttp.ClientWebSocketResponse] = []

        async def one() -> int:
            try:
                ws = await http.ws_connect(web.base + WS)
            except aiohttp.WSServerHandshakeError as exc:
                return exc.status
            opened.append(ws)
            return 101
        codes = await asyncio.gather(*(one() for _ in range(100)))
        assert sorted(codes) == [101, 101] + [503] * 98
        for ws in opened:
            await screen_until(ws, "1 Tasks")
        consoles = web.consoles()
        assert len(consoles) == 2
        async with http.get(web.base + "/") as r:  # the page says so too
            assert r.status == 503 and "All 2 web consoles are in use" in await r.text()
        for ws in opened:
            await ws.close()
    # a closed websocket ends its console: nothing is left
    wait_for(lambda: not any(alive(p) for p in consoles), 30, "the consoles to end")


async def test_an_idle_console_is_closed_and_its_process_ends(
        start_web: Callable[..., Web]) -> None:
    web = start_web("--idle-minutes", "0.05")  # 3 s
    async with client() as http:
        await sign_in(web, http)
        async with http.ws_connect(web.base + WS) as ws:
            started = time.monotonic()
            await screen_until(ws, "1 Tasks")
            (console,) = web.consoles()
            await until_closed(ws, 30)
            assert ws.close_code == 4000
            assert time.monotonic() - started >= 2.5
    wait_for(lambda: not alive(console), 20, "the idle console to end")
    wait_for(lambda: any("idle" in line for line in web.lines()), 10, "the idle line")


async def test_a_crashed_console_leaves_the_others_and_the_store_alone(
        start_web: Callable[..., Web]) -> None:
    web = start_web()
    async with client() as http:
        await sign_in(web, http)
        async with http.ws_connect(web.base + WS) as victim:
            await screen_until(victim, "1 Tasks")
            (a,) = web.consoles()
            other = await http.ws_connect(web.base + WS)
            await screen_until(other, "1 Tasks")
            (b,) = set(web.consoles()) - {a}
            os.killpg(a, signal.SIGKILL)  # one console (and its group) dies
            await until_closed(victim, 20)  # its browser is told: the socket closes
            assert web.consoles() == [b]
            await other.send_json(["stdin", "2"])  # the other still answers: mode 2
            await screen_until(other, "Pending approvals")
            # SIGTERM with a console open: it is stopped, then the server exits 0
            web.proc.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(web.proc.wait, 30) == 0
            assert not alive(b)
            await other.close()
    assert query(web.db, "PRAGMA integrity_check") == [("ok",)]
    assert web.approval()[1] == "pending"


async def test_a_killed_server_takes_its_consoles_with_it(
        start_web: Callable[..., Web]) -> None:
    web = start_web()
    async with client() as http:
        await sign_in(web, http)
        async with http.ws_connect(web.base + WS) as ws:
            await screen_until(ws, "1 Tasks")
            (console,) = web.consoles()
            web.proc.kill()  # SIGKILL: no clean-up of its own runs
            web.proc.wait(10)
    wait_for(lambda: not alive(console), 20, "the orphaned console to end")


async def test_bearer_header_and_rotation(start_web: Callable[..., Web],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    web = start_web()
    async with client() as http:
        token = await sign_in(web, http)
        bearer = {"Authorization": f"Bearer {token}"}  # a proxy or a script: the header
        async with aiohttp.ClientSession() as script:
            async with script.get(web.base + "/", headers=bearer) as r:
                assert r.status == 200 and "starting your console as alice" in await r.text()
                assert "Set-Cookie" not in r.headers and len(r.history) == 0
            async with script.ws_connect(web.base + WS, headers=bearer) as ws:
                await screen_until(ws, "1 Tasks")
        monkeypatch.setenv("CLAWTOWER_HOME", str(web.home))
        from clawtower.core import console_tokens

        console_tokens.issue("alice")  # a rotation (as --rotate-token does) ends the session
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(web.base + WS)
        assert refused.value.status == 401
        async with http.get(web.base + "/", allow_redirects=False) as r:
            assert r.status == 401
        console_tokens.tokens_file().write_text("alice: [broken\n")  # broken by hand
        async with http.post(web.base + "/login", data={"token": token},
                             allow_redirects=False) as r:
            assert r.status == 401  # refused, not a 500
    wait_for(lambda: any("every sign-in refused" in line and "console-tokens.yaml" in line
                         for line in web.lines()), 10, "the broken file in the log")
    wait_for(lambda: web.consoles() == [], 20, "no console left")


async def decide(http: aiohttp.ClientSession, web: Web, approval: str,
                 done: Callable[[str], bool], headers: dict[str, str] | None = None) -> str:
    """Mode 2, `a`, `y` in a web console over a raw websocket, until `done(what it showed
    after y, escape sequences removed)`; that text."""
    async with http.ws_connect(web.base + WS, headers=headers) as ws:
        await screen_until(ws, "1 Tasks")
        await ws.send_json(["stdin", "2"])
        # `a` once the approval's row is drawn, as an operator would: the frame (and the
        # list's title) paints before the store has loaded, and `a` then finds no row
        await screen_until(ws, "Pending approvals · 1", approval)
        await ws.send_json(["stdin", "a"])
        await screen_until(ws, f"Approve {approval}?")
        await ws.send_json(["stdin", "y"])
        seen = ""
        async with asyncio.timeout(90):
            while not done(shown := re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen)):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.2):
                        msg = await ws.receive()
                        if msg.type == aiohttp.WSMsgType.BINARY:
                            seen += msg.data.decode("utf-8", "replace")
        return shown


async def test_required_approver_holds_across_web_consoles(
        start_web: Callable[..., Web], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """T-4's spec names bob as its approver: alice's web console cannot decide it, bob's
    (his own token, sent as a Bearer header) can, and the store says bob."""
    demo = tmp_path / "demo"
    shutil.copytree(ROOT / "examples" / "demo", demo)
    spec = demo / "specs" / "04-release-notes.yaml"
    spec.write_text(spec.read_text() + "required_approver: bob\n")
    (tmp_path / "bob-demo").mkdir()
    source = headless_demo(tmp_path / "bob-demo" / "home", demo)
    web = start_web(source=source)
    approval, _, _ = web.approval()
    assert query(web.db, "SELECT required_approver FROM approvals WHERE id=?",
                 (approval,)) == [("bob",)]
    monkeypatch.setenv("CLAWTOWER_HOME", str(web.home))
    from clawtower.core import console_tokens

    bob = console_tokens.issue("bob")
    async with client() as http:
        await sign_in(web, http)  # alice
        await decide(http, web, approval, lambda shown: "only bob may decide it" in shown)
        assert web.approval()[1:] == ("pending", None)
        shown = await decide(http, web, approval,
                             lambda _: web.approval()[1:] == ("approved", "bob"),
                             {"Authorization": f"Bearer {bob}"})
        assert "only bob" not in shown
    wait_for(lambda: web.consoles() == [], 30, "no console left")


async def test_a_foreign_origin_is_refused(start_web: Callable[..., Web]) -> None:
    web = start_web()
    async with client() as http:
        await sign_in(web, http)
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(web.base + WS, headers={"Origin": "http://evil.example"})
        assert refused.value.status == 403
    assert web.consoles() == []


def test_beyond_loopback_warns_and_web_options_need_web(tmp_path: Path) -> None:
    env = dict(os.environ, CLAWTOWER_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    r = subprocess.run([str(CLAWTOWER), "console", "--port", "9"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stderr == "clawtower: error: --port: only with --web\n"
    r = subprocess.run([str(CLAWTOWER), "console", "--web", "--max-consoles", "0"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--max-consoles" in r.stderr
    r = subprocess.run([str(CLAWTOWER), "console", "--web", "--public-url",
                        "https://x.example/sub"], env=env, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "--public-url" in r.stderr
    with socket.socket() as taken:  # a port in use: an error, and no token made unseen
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        r = subprocess.run([str(CLAWTOWER), "console", "--web", "--port",
                            str(taken.getsockname()[1])], env=env, capture_output=True,
                           text=True, timeout=30)
    assert r.returncode == 1 and "address already in use" in r.stderr, r.stderr
    assert "token" not in r.stdout and not (tmp_path / "home" / "console-tokens.yaml").exists()
    proc = subprocess.Popen([str(CLAWTOWER), "console", "--web", "--host", "0.0.0.0",
                             "--port", "0"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "warning: --host 0.0.0.0 listens beyond this machine" in line
        assert "TLS reverse proxy" in line
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
