"""The console in a real headless Chromium: sign in with the printed link, approve the
demo's T-4 from the browser, and nothing spawned for a caller without a valid token."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from conftest import Chromium, Web, alive, query, until

pytestmark = pytest.mark.xdist_group("web-console")


class Screen:
    """What the console sent to the page (the websocket's frames, decoded): the terminal
    is drawn on a canvas, so this is where a test reads the screen."""

    def __init__(self, page: Any) -> None:
        self.data: list[str] = []
        page.on("websocket", lambda ws: ws.on("framereceived", self._frame))

    def _frame(self, payload: str | bytes) -> None:
        self.data.append(payload if isinstance(payload, str)
                         else payload.decode("utf-8", "replace"))

    def mark(self) -> int:
        return len(self.data)

    def shows(self, text: str, since: int = 0) -> bool:
        return text in "".join(self.data[since:])


async def open_console(chromium: Chromium, web: Web) -> tuple[Any, Any, Screen]:
    ctx = await chromium.browser.new_context(viewport={"width": 1280, "height": 800})
    page = await ctx.new_page()
    screen = Screen(page)
    assert web.link is not None
    resp = await page.goto(web.link)
    assert resp is not None and resp.status == 200
    assert "token=" not in page.url  # exchanged for the cookie, and gone from the bar
    await page.wait_for_selector("body.-first-byte", timeout=30_000)
    await until(lambda: screen.shows("1 Tasks") and screen.shows("T-4"), 30, "Tasks mode")
    await page.click("#terminal")  # the keyboard goes to the terminal, as a person's would
    return ctx, page, screen


async def approve_dialog(page: Any, screen: Screen, approval: str) -> None:
    """Mode 2, then `a` on the first (T-4's) approval: its confirm dialog is open."""
    mark = screen.mark()
    await page.keyboard.press("2")
    await until(lambda: screen.shows("Pending approvals", mark) and screen.shows(approval),
                20, "mode 2")
    mark = screen.mark()
    await page.keyboard.press("a")
    await until(lambda: screen.shows(f"Approve {approval}?", mark), 20, "the confirm dialog")


def test_an_operator_approves_t4_in_chromium(chromium: Chromium,
                                             start_web: Callable[..., Web]) -> None:
    web = start_web()
    approval, status, _ = web.approval()
    assert status == "pending"

    async def body() -> int:
        ctx, page, screen = await open_console(chromium, web)
        try:
            cookies = await ctx.cookies()
            assert [(c["name"], c["httpOnly"], c["sameSite"]) for c in cookies] == \
                [("clawtower_session", True, "Strict")]
            (console,) = web.consoles()
            await approve_dialog(page, screen, approval)
            await page.keyboard.press("y")
            # the decision is alice's (the token's name), not the server's own user's
            await until(lambda: web.approval()[1:] == ("approved", "alice"), 20,
                        "the decision")
            await until(lambda: query(web.db, "SELECT phase FROM tasks WHERE id='T-4'")
                        == [("completed",)], 30, "T-4 to complete")
            return console
        finally:
            await ctx.close()

    console = chromium.run(body())
    assert query(web.db, "SELECT actor FROM events WHERE type='approval.decided' AND"
                         " entity_id=?", (approval,)) == [("alice",)]
    # the browser is gone: so is its console, reaped by the server (a zombie is not alive
    # yet still the server's child: waited for, not read at once)
    asyncio.run(until(lambda: not alive(console), 20, "the console process to end"))
    asyncio.run(until(lambda: web.consoles() == [], 20, "the server to reap its console"))


def test_no_console_starts_without_a_valid_token(chromium: Chromium,
                                                 start_web: Callable[..., Web]) -> None:
    web = start_web("--auth-failures", "50")
    assert web.link is not None
    link = web.link

    async def body() -> None:
        ctx = await chromium.browser.new_context()
        page = await ctx.new_page()
        try:
            resp = await page.goto(web.base + "/")
            assert resp is not None and resp.status == 401
            assert await page.locator("input[name=token]").count() == 1  # the form
            resp = await page.goto(web.base + "/?token=ct_wrong")
            assert resp is not None and resp.status == 401
            await page.fill("input[name=token]", "ct_also_wrong")
            await page.click("button[type=submit]")
            assert "not accepted" in await page.content()
            # a websocket opened by hand, without the cookie: refused before the upgrade
            opened = await page.evaluate("""url => new Promise(done => {
                const ws = new WebSocket(url);
                ws.onopen = () => done('open');
                ws.onerror = () => done('refused');
            })""", web.base.replace("http:", "ws:") + "/ws?width=80&height=24")
            assert opened == "refused"
            await asyncio.sleep(0.5)
            assert web.consoles() == []
            # the link signs in once; the same token in a query string again is refused
            resp = await page.goto(link)
            assert resp is not None and resp.status == 200
            await page.wait_for_selector("body.-first-byte", timeout=30_000)
            assert len(web.consoles()) == 1
            other = await chromium.browser.new_context()
            try:
                resp = await (await other.new_page()).goto(link)
                assert resp is not None and resp.status == 401
                assert await other.cookies() == []
            finally:
                await other.close()
            assert len(web.consoles()) == 1
        finally:
            await ctx.close()

    chromium.run(body())
    asyncio.run(until(lambda: any("refused a sign-in" in line and "used already" in line
                                  for line in web.lines()), 10, "the used link's refusal"))


def test_a_browser_closed_mid_approval_decides_nothing(chromium: Chromium,
                                                       start_web: Callable[..., Web]) -> None:
    web = start_web()
    approval, _, _ = web.approval()

    async def body() -> int:
        ctx, page, screen = await open_console(chromium, web)
        (console,) = web.consoles()
        await approve_dialog(page, screen, approval)
        await ctx.close()  # the browser goes with the dialog open
        return console

    console = chromium.run(body())
    asyncio.run(until(lambda: not alive(console), 20, "the console process to end"))
    assert web.approval()[1:] == ("pending", None)
    assert query(web.db, "SELECT count(*) FROM events WHERE type='approval.decided'") == [(0,)]
    assert query(web.db, "PRAGMA integrity_check") == [("ok",)]
