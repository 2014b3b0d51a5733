"""The console in a real headless Chromium: sign in with the printed link, approve the
demo's T-4 from the browser, and nothing spawned for a caller without a valid token."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from conftest import Web, alive, query, wait_for

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


def open_console(chromium: Any, web: Web) -> tuple[Any, Any, Screen]:
    ctx = chromium.new_context(viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    screen = Screen(page)
    assert web.link is not None
    resp = page.goto(web.link)
    assert resp is not None and resp.status == 200
    assert "token=" not in page.url  # exchanged for the cookie, and gone from the bar
    page.wait_for_selector("body.-first-byte", timeout=30_000)
    wait_for(lambda: screen.shows("1 Tasks") and screen.shows("T-4"), 30, "Tasks mode", page)
    page.click("#terminal")  # the keyboard goes to the terminal, as a person's would
    return ctx, page, screen


def test_an_operator_approves_t4_in_chromium(chromium: Any,
                                             start_web: Callable[..., Web]) -> None:
    web = start_web()
    approval, status, _ = web.approval()
    assert status == "pending"
    ctx, page, screen = open_console(chromium, web)
    try:
        cookies = ctx.cookies()
        assert [(c["name"], c["httpOnly"], c["sameSite"]) for c in cookies] == \
            [("clawtower_session", True, "Strict")]
        (console,) = web.consoles()
        page.keyboard.press("2")
        wait_for(lambda: screen.shows("Approvals") and screen.shows(approval), 20, "mode 2", page)
        mark = screen.mark()
        page.keyboard.press("a")
        wait_for(lambda: screen.shows(f"Approve {approval}?", mark), 20, "the confirm dialog", page)
        page.keyboard.press("y")
        # the decision is alice's (the token's name), not the server's own user's
        wait_for(lambda: web.approval()[1:] == ("approved", "alice"), 20, "the decision")
        wait_for(lambda: query(web.db, "SELECT phase FROM tasks WHERE id='T-4'")
                 == [("completed",)], 30, "T-4 to complete")
        events = query(web.db, "SELECT actor FROM events WHERE type='approval.decided'"
                               " AND entity_id=?", (approval,))
        assert events == [("alice",)]
    finally:
        ctx.close()
    # the browser is gone: so is its console
    wait_for(lambda: not alive(console), 20, "the console process to end")
    assert web.consoles() == []


def test_no_console_starts_without_a_valid_token(chromium: Any,
                                                 start_web: Callable[..., Web]) -> None:
    web = start_web("--auth-failures", "50")
    ctx = chromium.new_context()
    page = ctx.new_page()
    try:
        resp = page.goto(web.base + "/")
        assert resp is not None and resp.status == 401
        assert page.locator("input[name=token]").count() == 1  # the sign-in form
        resp = page.goto(web.base + "/?token=ct_wrong")
        assert resp is not None and resp.status == 401
        page.fill("input[name=token]", "ct_also_wrong")
        page.click("button[type=submit]")
        assert "not accepted" in page.content()
        # a websocket opened by hand, without the cookie: refused before the upgrade
        opened = page.evaluate("""url => new Promise(done => {
            const ws = new WebSocket(url);
            ws.onopen = () => done('open');
            ws.onerror = () => done('refused');
        })""", web.base.replace("http:", "ws:") + "/ws?width=80&height=24")
        assert opened == "refused"
        time.sleep(0.5)
        assert web.consoles() == []
        # the link signs in once; the same token in a query string again is refused
        assert web.link is not None
        resp = page.goto(web.link)
        assert resp is not None and resp.status == 200
        page.wait_for_selector("body.-first-byte", timeout=30_000)
        assert len(web.consoles()) == 1
        other = chromium.new_context()
        try:
            resp = other.new_page().goto(web.link)
            assert resp is not None and resp.status == 401
            assert other.cookies() == []
        finally:
            other.close()
        assert len(web.consoles()) == 1
    finally:
        ctx.close()
    assert any("refused a sign-in" in line and "used already" in line
               for line in web.lines()), web.out


def test_a_browser_closed_mid_approval_decides_nothing(chromium: Any,
                                                       start_web: Callable[..., Web]) -> None:
    web = start_web()
    approval, _, _ = web.approval()
    ctx, page, screen = open_console(chromium, web)
    (console,) = web.consoles()
    page.keyboard.press("2")
    wait_for(lambda: screen.shows(approval), 20, "mode 2", page)
    mark = screen.mark()
    page.keyboard.press("a")
    wait_for(lambda: screen.shows(f"Approve {approval}?", mark), 20, "the confirm dialog", page)
    ctx.close()  # the browser goes with the dialog open
    wait_for(lambda: not alive(console), 20, "the console process to end")
    assert web.approval()[1:] == ("pending", None)
    assert query(web.db, "SELECT count(*) FROM events WHERE type='approval.decided'") == [(0,)]
    assert query(web.db, "PRAGMA integrity_check") == [("ok",)]
