"""`clawtower console --web`: the console in a browser, one console process per connection.

Built on textual-serve (the Textual project's aiohttp server; `textual serve` of textual-dev
is a click wrapper around the same `Server`). Its `Server` spawns the app for every websocket
that connects and has no notion of a user; this subclass puts authentication in front of
the spawn and owns each process's life:

- `/` without a session shows a sign-in form (401); `/?token=T` (the printed link) and the
  form's POST to `/login` exchange a console token (core/console_tokens.py) for an HttpOnly,
  SameSite=Strict session cookie, then redirect to `/` so the token leaves the address bar.
  A link's token is refused in query strings once exchanged; `Authorization: Bearer T` works
  on `/` and `/ws` (a proxy or a script). Refused tokens are rate-limited per address with
  the webhooks' limiter (core/triggers/ratelimit.py): 429 + Retry-After before the token is
  even looked at.
- Sessions and refused tokens are kept in the store (core/signin, issue 35): a session is
  the SHA-256 of its cookie (never the cookie), so a restarted server, or another one on the
  same store, knows it, and all of them count refused tokens in one window. A rotated token
  ends its sessions at their next request (a `console.signed_out` event).
- `/ws` is refused (401, 403 for a foreign Origin, 503 at the cap) *before* the upgrade:
  nothing is spawned for a caller without a session, or past `max_consoles`.
- Each console is `python -m clawtower.cli.main console --db DB` (exec, no shell) in a process group
  of its own with `CLAWTOWER_OPERATOR` set to the session's operator, so its approvals are
  recorded under that name and required_approver / require_different_approver apply as in
  a terminal. It is an ordinary console over the same store (its own engine and leases).
- A console ends when its browser goes (websocket closed, or no answer to a heartbeat
  within ~30 s), after `idle_s` without a key press or resize, when it quits or crashes, or
  when the server stops: the server asks it to quit, then SIGTERMs and SIGKILLs its group.
  A server killed outright takes its consoles with it (each asks the kernel for SIGTERM
  when its parent dies).
  A decision is one store transaction, so a console stopped half-way through a confirm
  dialog has decided nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp_jinja2
import jinja2
from aiohttp import WSMsgType, web
from textual_serve.app_service import AppService
from textual_serve.server import Server

from clawtower.core import console_tokens
from clawtower.core.assets import asset
from clawtower.core.errors import ClawError
from clawtower.core.signin import sessions as signin
from clawtower.core.signin.sessions import Session
from clawtower.core.store.interface import Store
from clawtower.core.triggers.ratelimit import FailureLimiter

log = logging.getLogger("clawtower.web")

COOKIE = "clawtower_session"
DEFAULT_PORT = 8788
DEFAULT_MAX_CONSOLES = 8
DEFAULT_IDLE_S = 30 * 60.0
SESSION_S = 12 * 3600.0  # a session cookie's life; then the token is asked again
QUIT_GRACE_S = 8.0  # a console's own quit (engine handover is 5 s) before SIGTERM
TERM_GRACE_S = 3.0  # SIGTERM before SIGKILL
MAX_MESSAGE = 64 * 1024  # a browser sends keys and sizes: nothing near this
TEMPLATE = "web_console.html"
SERVER_ENV = "CLAWTOWER_WEB_SERVER"


class ConsoleProcess(AppService):
    """One console process for one websocket: exec'd without a shell, in a process group of
    its own (so stopping it stops whatever it started), signed in as `operator`."""

    def __init__(self, argv: list[str], operator: str, **kwargs: Any) -> None:
        super().__init__(" ".join(argv), **kwargs)
        self.argv = argv
        self.operator = operator
        self.last_input = time.monotonic()

    def _build_environment(self, width: int = 80, height: int = 24) -> dict[str, str]:
        env = super()._build_environment(width=width, height=height)
        env["CLAWTOWER_OPERATOR"] = self.operator
        env[SERVER_ENV] = str(os.getpid())  # the console dies with the server (cli/console.py)
        return env

    async def _open_app_process(self, width: int = 80, height: int = 24
                                ) -> asyncio.subprocess.Process:
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=self._build_environment(width, height),
            start_new_session=True)
        assert process.stdin is not None
        self._stdin = process.stdin
        return process

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def runner(self) -> asyncio.Task[None] | None:
        """The task relaying the process's output; it ends when the process does."""
        return self._task

    def _signal_group(self, sig: int) -> None:
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, sig)

    async def stop(self) -> None:
        """Ask the console to quit; SIGTERM, then SIGKILL, its group if it does not. Safe
        to call more than once (the base class's stop waits forever on a hung app)."""
        task, self._task = self._task, None
        process = self._process
        if task is None or process is None:
            return
        if process.returncode is None:
            await self.send_meta({"type": "quit"})
            for sig, grace in ((None, QUIT_GRACE_S), (signal.SIGTERM, TERM_GRACE_S),
                               (signal.SIGKILL, None)):
                if sig is not None:
                    self._signal_group(sig)
                try:
                    await asyncio.wait_for(process.wait(), grace)
                    break
                except TimeoutError:
                    continue
        self._signal_group(signal.SIGKILL)  # anything it started and left in its group
        await task


class WebConsole(Server):
    """textual-serve's server with sign-in before any spawn, a cap, idle closing and whole
    process stops (see the module's docstring)."""

    def __init__(self, argv: list[str], store: Store, *, host: str = "127.0.0.1",
                 port: int = DEFAULT_PORT,
                 public_url: str | None = None, max_consoles: int = DEFAULT_MAX_CONSOLES,
                 idle_s: float = DEFAULT_IDLE_S, limiter: FailureLimiter | None = None,
                 say: Callable[[str], None] | None = None) -> None:
        super().__init__(" ".join(argv), host=host, port=port, title="clawtower",
                         public_url=public_url,
                         templates_path=asset("tui"))  # web_console.html
        self.argv = argv
        self.store = store
        self.public_base = public_url.rstrip("/") if public_url else None
        self.max_consoles = max_consoles
        self.idle_s = idle_s
        self.limiter = limiter or FailureLimiter()
        self.say = say or (lambda line: print(line, flush=True))
        self.consoles: set[ConsoleProcess] = set()
        self.reserved = 0  # websockets past the checks, their process not yet tracked
        self.bound_port: int | None = None

    # ------------------------------------------------------------------ the aiohttp app
    async def _make_app(self) -> web.Application:
        app = web.Application(client_max_size=8 * 1024, middlewares=[self._store_down])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path),
                             autoescape=True)
        app.add_routes([
            web.get("/", self.handle_index, name="index"),
            web.post("/login", self.handle_login, name="login"),
            web.get("/ws", self.handle_websocket, name="websocket"),
            web.static("/static", self.statics_path, name="static"),
        ])
        app.on_response_prepare.append(self._headers)
        app.on_shutdown.append(self.on_shutdown)
        return app

    @web.middleware
    async def _store_down(self, request: web.Request,
                          handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        """Sessions and the failure window are the store's: a store that cannot answer
        refuses the request (503, nothing started), as a webhook does, never a 500."""
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except ClawError as exc:
            log.warning("web console: the store did not answer: %s", exc)
            self.say(f"clawtower console: a request refused: the store did not answer ({exc})")
            return self._page(503, "The console's store is not answering: try again shortly.",
                              form=False)

    @staticmethod
    async def _headers(request: web.Request, response: web.StreamResponse) -> None:
        """Nothing cached, never framed (keys typed into a framed console are a clickjack),
        no Referer carrying a URL out, no Server banner."""
        response.headers.pop("Server", None)
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Content-Type-Options"] = "nosniff"

    async def run(self, stop: asyncio.Event, ready: Callable[[int], None] | None = None
                  ) -> None:
        """Serve until `stop` is set; `ready(port)` once listening. Every console is stopped
        before this returns."""
        app = await self._make_app()
        runner = web.AppRunner(app, handle_signals=False, access_log=None,
                               shutdown_timeout=QUIT_GRACE_S + TERM_GRACE_S + 2)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port)
            await site.start()
            self.bound_port = int(runner.addresses[0][1])
            if ready is not None:
                ready(self.bound_port)
            await stop.wait()
        finally:
            await runner.cleanup()
            await self.stop_all()

    async def on_shutdown(self, app: web.Application) -> None:
        await self.stop_all()

    async def stop_all(self) -> None:
        await asyncio.gather(*(c.stop() for c in list(self.consoles)),
                             return_exceptions=True)

    # ------------------------------------------------------------------ sign-in
    async def _session(self, request: web.Request) -> Session | None:
        """The cookie's session in the store (one indexed read), while its token is current:
        a rotated token's session ends here (recorded); a tokens file broken by hand refuses
        it for now without ending it."""
        sid = request.cookies.get(COOKIE)
        if not sid or len(sid) > 200:
            return None
        s = await signin.lookup(self.store, sid)
        if s is None:
            return None
        try:
            current = console_tokens.current(s.operator, s.token_sha256)
        except ClawError as exc:
            self.say(f"clawtower console: every sign-in refused: {exc}")
            return None
        if not current:
            await signin.sign_out(self.store, s, "its token was rotated")
            self.say(f"clawtower console: {s.operator}'s session ended: its token was"
                     " rotated")
            return None
        return s

    def _tokens(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A look-up in the tokens file; a file broken by hand refuses everyone (and the
        server's log says why) instead of answering 500."""
        try:
            return fn(*args)
        except ClawError as exc:
            self.say(f"clawtower console: every sign-in refused: {exc}")
            return None

    def _bearer(self, request: web.Request) -> str | None:
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        return value.strip() if scheme.lower() == "bearer" and value.strip() else None

    def _page(self, status: int, message: str, *, form: bool = True,
              headers: dict[str, str] | None = None) -> web.Response:
        """The fixed pages a caller without a session sees: nothing about the server."""
        body = f"<p>{html.escape(message)}</p>"
        if form:
            body += ('<form method="post" action="/login"><label>Console token '
                     '<input type="password" name="token" autocomplete="current-password"'
                     ' autofocus></label> <button type="submit">Sign in</button></form>')
        return web.Response(status=status, content_type="text/html", headers=headers,
                            text=f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
                                 f"<title>clawtower</title></head><body>{body}</body></html>")

    async def _throttled(self, request: web.Request) -> web.Response | None:
        wait = await signin.throttled(self.store, self.limiter, request.remote or "?")
        if wait is None:
            return None
        return self._page(429, f"Too many refused tokens from your address: try again in"
                               f" {wait} s.", form=False, headers={"Retry-After": str(wait)})

    async def _refuse(self, request: web.Request, why: str) -> web.Response:
        """A refused token: counted (in the store), logged (never the token), one fixed
        answer."""
        addr = request.remote or "?"
        episode = await signin.refused(self.store, self.limiter, addr, why)
        self.say(f"clawtower console: refused a sign-in from {addr}: {why}"
                 + (" (now throttled)" if episode else ""))
        return self._page(401, "That token was not accepted. A sign-in link works once;"
                               " after that, sign in here with the token"
                               " (a new one: clawtower console --web --rotate-token).")

    async def _who(self, request: web.Request) -> Session | web.Response | None:
        """Who the request is: a Bearer header beats a cookie (no cookie, no redirect: a
        proxy that sends the header sends it on /ws too); a refused header is the answer."""
        if (bearer := self._bearer(request)) is not None:
            return await self._sign_in(request, bearer, via_link=False)
        return await self._session(request)

    async def _sign_in(self, request: web.Request, token: str, *, via_link: bool
                       ) -> web.Response | Session:
        if (throttled := await self._throttled(request)) is not None:
            return throttled
        t = self._tokens(console_tokens.verify, token)
        if not t:
            return await self._refuse(request, "unknown token")
        if via_link and t.link_used:
            return await self._refuse(request,
                                      f"{t.operator}'s sign-in link was used already")
        if via_link:
            console_tokens.mark_link_used(t)
        return Session(t.operator, t.sha256, self.store.clock.now() + SESSION_S)

    async def _with_cookie(self, s: Session, via: str) -> web.Response:
        """A new session (its cookie's hash in the store) and the cookie, back to `/`."""
        sid, _ = await signin.sign_in(self.store, s.operator, s.token_sha256, SESSION_S, via)
        r = web.Response(status=303, headers={"Location": "/"})
        r.set_cookie(COOKIE, sid, max_age=int(SESSION_S), path="/", httponly=True,
                     samesite="Strict", secure=(self.public_base or "").startswith("https:"))
        return r

    async def handle_login(self, request: web.Request) -> web.Response:
        if (throttled := await self._throttled(request)) is not None:
            return throttled
        try:
            form = await request.post()
        except (ValueError, web.HTTPException):
            form = {}  # type: ignore[assignment]
        token = form.get("token")
        if not isinstance(token, str) or not token.strip():
            return await self._refuse(request, "no token in the form")
        got = await self._sign_in(request, token.strip(), via_link=False)
        return await self._with_cookie(got, "form") if isinstance(got, Session) else got

    # ------------------------------------------------------------------ the page
    def _ws_url(self, request: web.Request) -> str:
        base = self.public_base or f"{'https' if request.secure else 'http'}://{request.host}"
        scheme, rest = base.split(":", 1)
        return ("wss:" if scheme == "https" else "ws:") + rest + "/ws"

    def _full(self) -> bool:
        return len(self.consoles) + self.reserved >= self.max_consoles

    def _full_page(self) -> web.Response:
        return self._page(503, f"All {self.max_consoles} web consoles are in use: try again"
                               " when one closes.", form=False)

    async def handle_index(self, request: web.Request) -> web.Response:
        token = request.query.get("token")
        if token is not None:  # the printed link: exchanged once, then refused here
            got = await self._sign_in(request, token, via_link=True)
            return await self._with_cookie(got, "link") if isinstance(got, Session) else got
        session = await self._who(request)
        if isinstance(session, web.Response):
            return session
        if session is None:
            return self._page(401, "Sign in to the clawtower console.")
        if self._full():
            return self._full_page()
        font = request.query.get("fontsize", "16")
        context = {
            "title": "clawtower",
            "operator": session.operator,
            "idle_minutes": f"{self.idle_s / 60:g}",
            "font_size": int(font) if font.isdigit() and 6 <= int(font) <= 64 else 16,
            "static_url": "/static/",
            "websocket_url": self._ws_url(request),
        }
        return aiohttp_jinja2.render_template(TEMPLATE, request, context)

    # ------------------------------------------------------------------ the websocket
    def _foreign_origin(self, request: web.Request) -> bool:
        """A browser always sends Origin on a websocket: one from another site is a page
        trying to drive the console with the operator's cookie (SameSite=Strict already
        keeps the cookie back; this is the second lock)."""
        origin = request.headers.get("Origin")
        if origin is None:
            return False
        want = urlsplit(self.public_base).netloc if self.public_base else request.host
        return urlsplit(origin).netloc != want

    async def handle_websocket(self, request: web.Request  # type: ignore[override]
                               ) -> web.StreamResponse:
        session = await self._who(request)
        if isinstance(session, web.Response):
            return session
        # every refusal comes before the upgrade: no process for any of them
        if session is None:
            return web.Response(status=401, text="sign in first")
        if self._foreign_origin(request):
            return web.Response(status=403, text="cross-site websocket refused")
        if self._full():
            return web.Response(status=503, text=f"all {self.max_consoles} consoles in use")
        self.reserved += 1
        reserved = True
        ws = web.WebSocketResponse(heartbeat=15, max_msg_size=MAX_MESSAGE)
        console: ConsoleProcess | None = None
        try:
            await ws.prepare(request)
            console = ConsoleProcess(self.argv, session.operator,
                                     write_bytes=ws.send_bytes, write_str=ws.send_str,
                                     close=ws.close, download_manager=self.download_manager)
            self.consoles.add(console)
            self.reserved -= 1
            reserved = False
            await console.start(_size(request, "width", 80), _size(request, "height", 24))
            self.say(f"clawtower console: {session.operator} opened a console"
                     f" (pid {console.pid}; {len(self.consoles)} open)")
            await self._relay(ws, console)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # a broken connection or a console that would not start
            log.warning("web console: %s: %s", type(exc).__name__, exc)
        finally:
            if reserved:
                self.reserved -= 1
            if console is not None:
                await asyncio.shield(console.stop())
                self.consoles.discard(console)
                self.say(f"clawtower console: {session.operator}'s console closed"
                         f" (pid {console.pid}; {len(self.consoles)} open)")
            with contextlib.suppress(Exception):
                await ws.close()
        return ws

    async def _relay(self, ws: web.WebSocketResponse, console: ConsoleProcess) -> None:
        """Browser → console until the browser goes, the console ends (quit or crash), or
        nothing was typed for `idle_s`."""
        reader = asyncio.create_task(self._process_messages(ws, console))
        idle = asyncio.create_task(self._idle(console))
        waits: set[asyncio.Future[Any]] = {reader, idle}
        if console.runner is not None:
            waits.add(console.runner)
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if idle in done:
                self.say(f"clawtower console: {console.operator}'s console was idle for"
                         f" {self.idle_s:g} s: closed")
                await ws.close(code=4000, message=b"idle")
        finally:
            for t in (reader, idle):
                t.cancel()
            await asyncio.gather(reader, idle, return_exceptions=True)

    async def _idle(self, console: ConsoleProcess) -> None:
        while (left := console.last_input + self.idle_s - time.monotonic()) > 0:
            await asyncio.sleep(min(left, 30.0))

    async def _process_messages(self, websocket: web.WebSocketResponse,  # type: ignore[override]
                                app_service: ConsoleProcess) -> None:
        """The browser's messages (textual-serve's protocol); anything malformed is dropped,
        never raised."""
        async for message in websocket:
            if message.type != WSMsgType.TEXT:
                continue
            try:
                envelope = json.loads(message.data)
                kind, data = envelope[0], (envelope[1] if len(envelope) > 1 else None)
            except (ValueError, TypeError, IndexError, KeyError):
                continue
            if kind == "stdin" and isinstance(data, str):
                app_service.last_input = time.monotonic()
                await app_service.send_bytes(data.encode("utf-8", "replace"))
            elif kind == "resize" and isinstance(data, dict):
                app_service.last_input = time.monotonic()
                w, h = data.get("width"), data.get("height")
                if isinstance(w, int) and isinstance(h, int) and 1 <= w <= 1000 \
                        and 1 <= h <= 1000:
                    await app_service.set_terminal_size(w, h)
            elif kind == "ping":
                await websocket.send_json(["pong", data])
            elif kind == "blur":
                await app_service.blur()
            elif kind == "focus":
                await app_service.focus()


def _size(request: web.Request, name: str, default: int) -> int:
    v = request.query.get(name, "")
    return int(v) if v.isdigit() and 1 <= int(v) <= 1000 else default


def console_argv(db: str, config: str | None) -> list[str]:
    """The command each browser connection runs: this Python's clawtower console."""
    argv = [sys.executable, "-m", "clawtower.cli.main", "console", "--db", db]
    return [*argv, "--config", config] if config else argv


__all__ = ["ConsoleProcess", "WebConsole", "console_argv"]
