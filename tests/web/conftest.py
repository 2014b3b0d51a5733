"""The web console's fixtures: the headless demo's store (once a session), a running
`clawtower console --web` on a copy of it, and one headless Chromium for the session.

Chromium is Debian's (`/usr/bin/chromium`, installed by `scripts/install-peers.sh chromium`),
driven by Playwright from PyPI: no browser is downloaded at run time. Tests needing it skip
with the reason when it (or playwright) is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from chromium import ARGS, CHROMIUM

ROOT = Path(__file__).resolve().parents[2]
CLAWTOWER = Path(sys.executable).with_name("clawtower")
OPERATOR = "alice"
T = TypeVar("T")


def child_pids(pid: int) -> list[int]:
    """The live children of `pid` (zombies included: one is a process left behind too)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(d))
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def query(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    import sqlite3
    import urllib.parse

    conn = sqlite3.connect(f"file:{urllib.parse.quote(str(db))}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def wait_for(check: Callable[[], Any], timeout: float = 30, what: str = "") -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what or check}")


@dataclass
class Web:
    """A running `clawtower console --web` on a copy of the demo's store."""

    proc: subprocess.Popen[str]
    home: Path
    base: str
    link: str | None
    out: list[str] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)

    @property
    def db(self) -> Path:
        return self.home / "clawtower.db"

    def consoles(self) -> list[int]:
        """The server's console processes now (each remembered, to check it is gone)."""
        pids = child_pids(self.proc.pid)
        self.seen.update(pids)
        return pids

    def lines(self) -> list[str]:
        """What the server printed so far (a thread reads its stdout)."""
        return list(self.out)

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.out.append(line.rstrip("\n"))

    def approval(self) -> tuple[str, str, str | None]:
        """T-4's approval: (id, status, decided_by)."""
        (row,) = query(self.db, "SELECT id, status, decided_by FROM approvals WHERE"
                                " subject='T-4' ORDER BY seq")
        return row


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["CLAWTOWER_HOME"] = str(home)
    env["CLAWTOWER_OPERATOR"] = "terminal-user"  # web consoles must not inherit this name
    env.pop("CLAWTOWER_DEMO_DIR", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def headless_demo(home: Path, demo_dir: Path | None = None) -> Path:
    env = _env(home)
    if demo_dir is not None:
        env["CLAWTOWER_DEMO_DIR"] = str(demo_dir)
    r = subprocess.run([str(CLAWTOWER), "demo", "--headless", "--speed", "0"], env=env,
                       capture_output=True, text=True, timeout=120, cwd=str(home.parent))
    assert r.returncode == 0, r.stderr
    return home


@pytest.fixture(scope="session")
def demo_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`clawtower demo --headless --speed 0` once: T-4 waits for its release approval."""
    return headless_demo(tmp_path_factory.mktemp("web-demo") / "home")


def launched(web: Web, what: str) -> Web:
    """Wait until `web`'s console has said how to sign in (or has exited), then read its
    address and its one-time link: a console that made a token prints "sign in as NAME
    ...:" and the link on the next line, so the wait is for that link line (the line
    before it alone, read a moment early on a busy machine, left the link unread)."""
    def up() -> bool:
        lines = web.lines()
        return web.proc.poll() is not None or any("?token=" in x for x in lines) or any(
            x.startswith("sign in") and not x.rstrip().endswith(":") for x in lines)
    wait_for(up, 30, what)
    m = re.search(r"web console on (http://\S+?)/ ", "\n".join(web.out))
    assert m and web.proc.poll() is None, (web.out, web.proc.stderr.read()
                                           if web.proc.stderr and web.proc.poll() is not None
                                           else "")
    web.base = m.group(1)
    links = [x for x in web.out if "?token=" in x]
    web.link = links[0].strip() if links else None
    return web


@pytest.fixture
def start_web(demo_home: Path, tmp_path: Path) -> Iterator[Callable[..., Web]]:
    """`start_web(*args)`: the web console on a fresh copy of the demo's home, a token for
    alice made (`--by alice`); stopped (SIGTERM) after the test, which then checks that no
    console process it ever saw is left."""
    started: list[Web] = []

    def start(*args: str, by: str = OPERATOR, source: Path | None = None) -> Web:
        home = tmp_path / f"home{len(started)}"
        shutil.copytree(source or demo_home, home)
        argv = [str(CLAWTOWER), "console", "--web", "--port", "0", "--by", by, *args]
        proc = subprocess.Popen(argv, env=_env(home), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=str(tmp_path))
        web = Web(proc, home, "", None)
        started.append(web)
        threading.Thread(target=web.read, daemon=True).start()
        return launched(web, "the web console to start")

    yield start
    for web in started:
        web.consoles()
        if web.proc.poll() is None:
            web.proc.send_signal(signal.SIGTERM)
            try:
                code = web.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                web.proc.kill()
                pytest.fail("the web console did not stop on SIGTERM")
            assert code == 0, web.proc.stderr.read() if web.proc.stderr else ""
        left = [p for p in web.seen if alive(p)]
        for p in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        assert not left, f"console processes left behind: {left}"


class Chromium:
    """Headless Chromium driven by Playwright's async API on a thread of its own, with its
    own event loop: the test's thread keeps no loop running (pytest-asyncio's tests, after
    these on the same xdist worker, need none to be), and frames reach the page's handlers
    while a test waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="chromium")
        self.thread.start()
        self.browser: Any = None
        self._pw: Any = None

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def launch(self) -> None:
        from playwright.async_api import async_playwright

        self._pw = await async_playwright().start()
        self.browser = await self._pw.chromium.launch(
            executable_path=CHROMIUM, args=ARGS)

    async def close(self) -> None:
        if self.browser is not None:
            await self.browser.close()
        if self._pw is not None:
            await self._pw.stop()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.run(self.close(), 30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def until(check: Callable[[], Any], timeout: float = 30, what: str = "") -> Any:
    """`wait_for` for code on the browser's loop."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        await asyncio.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what or check}")


@pytest.fixture(scope="session")
def chromium() -> Iterator[Chromium]:
    """One headless Chromium for the session (Playwright, the system browser)."""
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        pytest.skip("playwright missing: pip install -e '.[test]'")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no Chromium at {CHROMIUM} (bash scripts/install-peers.sh chromium)")
    c = Chromium()
    try:
        c.run(c.launch(), 60)
        yield c
    finally:
        c.stop()
