"""`clawtower console`: the operator console in this terminal (as bare `clawtower`), or
served to browsers with `--web` (tui/web.py: one console process per signed-in browser)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from clawtower.core.store.interface import Store

from .common import add_config_option, default_agents_file, operator_name, stop_on_signals

T = TypeVar("T")
WEB_ONLY = ("host", "port", "public_url", "rotate_token", "by", "max_consoles",
            "idle_minutes", "auth_failures", "auth_window")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = subparsers.add_parser(
        "console", help="open the console (bare `clawtower` does too); --web serves it to"
        " browsers")
    add_config_option(c, "--agents")
    c.add_argument("--web", action="store_true",
                   help="serve the console to browsers: one console per signed-in browser")
    c.add_argument("--host", default=None,
                   help="where --web listens (default 127.0.0.1; beyond loopback: see README)")
    c.add_argument("--port", type=int, default=None,
                   help="--web's port (default 8788; 0 picks a free one)")
    c.add_argument("--public-url", default=None, metavar="URL",
                   help="the address browsers use when a reverse proxy is in front"
                   " (https://console.example.com)")
    c.add_argument("--rotate-token", action="store_true",
                   help="make a new token for --by (the old one and its sessions stop"
                   " working) and print its link")
    c.add_argument("--by", default=None, metavar="NAME",
                   help="the operator a new token signs in as (default: $CLAWTOWER_OPERATOR"
                   " or your user name)")
    c.add_argument("--max-consoles", type=int, default=None, metavar="N",
                   help="web consoles open at once (default 8; each is a process)")
    c.add_argument("--idle-minutes", type=float, default=None, metavar="M",
                   help="close a web console after M minutes without a key (default 30)")
    c.add_argument("--auth-failures", type=int, default=None, metavar="N",
                   help="refused tokens per address before 429 (default 20)")
    c.add_argument("--auth-window", type=float, default=None, metavar="SECONDS",
                   help="the window those are counted in (default 60)")
    c.set_defaults(handler=cmd_console)


def terminal(db: str, config: str | None) -> int:
    """The console in this terminal: what bare `clawtower` opens (and each browser's
    console that `--web` starts)."""
    from clawtower.tui.app import run_console

    die_with_web_server()
    store_check(db)
    return run_console(db, run_engine=True, agents_file=config or default_agents_file(),
                       operator=operator_name())


ORPHAN_GRACE_S = 5.0  # a console whose server died has this long to quit cleanly


def die_with_web_server() -> None:
    """In a console `--web` started: SIGTERM (a clean quit) when the server dies, even by
    SIGKILL (Linux's parent-death signal), so no console outlives it. The clean quit (the
    web driver's, which stops the console's engine) is bounded: a watcher thread ends the
    process ORPHAN_GRACE_S after the server is gone (on a busy machine the quit took more
    than 20 s; a decision is one store transaction, so an exit half-way decided nothing)."""
    import os

    server = os.environ.get("CLAWTOWER_WEB_SERVER")  # tui/web.py SERVER_ENV
    if not server or not server.isdigit():
        return
    import contextlib
    import ctypes
    import signal
    import threading

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != int(server):  # it died before the signal was asked for
        raise SystemExit(0)
    threading.Thread(target=_exit_when_orphaned, args=(int(server),), daemon=True,
                     name="orphan-watch").start()


def _exit_when_orphaned(server: int) -> None:
    import os
    import time

    while os.getppid() == server:
        time.sleep(0.25)
    time.sleep(ORPHAN_GRACE_S)
    os._exit(0)  # the clean quit did not finish: its server is gone, nobody waits for it


def store_check(db: str) -> None:
    """Open and close the store once, so a bad file fails before the console starts."""
    import asyncio

    from clawtower.core.store import open_store

    async def check() -> None:
        s = await open_store(db)
        await s.close()

    asyncio.run(check())


def cmd_console(args: argparse.Namespace) -> int | Awaitable[int]:
    if not args.web:
        from clawtower.core.errors import ValidationError

        given = [f"--{n.replace('_', '-')}" for n in WEB_ONLY
                 if getattr(args, n) not in (None, False)]
        if given:
            raise ValidationError(f"{', '.join(given)}: only with --web")
        return terminal(args.db, args.config)
    return _web(args)


def loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _web(args: argparse.Namespace) -> int:

    from clawtower.core.limits import check_float, check_host, check_int, check_name, check_text

    from .boundary import FLOATS, INTS

    # every option first (the same ranges as the boundary's), then the files: a refusal
    # opens, creates and writes nothing
    host = "127.0.0.1" if args.host is None else check_host(args.host, "--host")
    port = 8788 if args.port is None else check_int(args.port, "--port", *INTS["port"])
    max_consoles = check_int(_given(args.max_consoles, 8), "--max-consoles",
                             *INTS["max_consoles"])
    idle = check_float(_given(args.idle_minutes, 30.0), "--idle-minutes",
                       *FLOATS["idle_minutes"])
    failures = check_int(_given(args.auth_failures, 20), "--auth-failures",
                         *INTS["auth_failures"])
    window = check_float(_given(args.auth_window, 60.0), "--auth-window",
                         *FLOATS["auth_window"])
    by = check_name(args.by, "--by") if args.by is not None else operator_name()
    public = args.public_url
    if public is not None:
        from urllib.parse import urlsplit

        from clawtower.core.errors import ValidationError

        check_text(public, "--public-url", max_chars=2000, one_line=True)
        u = urlsplit(public)
        if u.scheme not in ("http", "https") or not u.netloc or u.path not in ("", "/") \
                or u.query or u.fragment:
            raise ValidationError(f"--public-url: {public!r}: expected http(s)://HOST[:PORT]"
                                  " (the console is served at the root of its address)")
    config = args.config or default_agents_file()
    from .common import load_agents

    load_agents(config)  # a bad agents file fails here, not in every browser's console
    from clawtower.core.store import open_store

    # so does a bad store; the server keeps it open: its sessions and failure counts live
    # there (issue 35)
    store = await open_store(args.db)
    try:
        return await _serve_web(args, store, host=host, port=port, public=public,
                                max_consoles=max_consoles, idle=idle, failures=failures,
                                window=window, by=by, config=config)
    finally:
        await store.close()


async def _serve_web(args: argparse.Namespace, store: Store, *, host: str, port: int,
                     public: str | None, max_consoles: int, idle: float, failures: int,
                     window: float, by: str, config: str | None) -> int:
    import asyncio

    from clawtower.core import console_tokens
    from clawtower.core.triggers.ratelimit import FailureLimiter

    tokens = console_tokens.load()
    # made once the port is bound (in ready): a start that fails leaves no unseen token
    make_token = args.rotate_token or (by not in tokens and (args.by is not None or not tokens))

    from clawtower.tui.web import WebConsole, console_argv

    server = WebConsole(console_argv(args.db, config), store, host=host, port=port,
                        public_url=public, max_consoles=max_consoles, idle_s=idle * 60,
                        limiter=FailureLimiter(failures, window))
    stop = asyncio.Event()
    stop_on_signals(stop.set)

    def ready(bound: int) -> None:
        base = (public or f"http://{_url_host(host)}:{bound}").rstrip("/")
        if not loopback(host):
            sys.stderr.write(
                f"clawtower: warning: --host {host} listens beyond this machine: anyone who"
                " can reach the port can try tokens, and over plain HTTP the token, the"
                " session cookie and every key and screen cross the network readable;"
                " put a TLS reverse proxy in front (README: The console in a browser)\n")
        print(f"clawtower: web console on http://{_url_host(host)}:{bound}/ (store"
              f" {args.db}; at most {max_consoles} consoles, idle ones closed after"
              f" {idle:g} min); ctrl+c stops", flush=True)
        if make_token:
            new_token = console_tokens.issue(by)
            print(f"sign in as {by} (this link works once; the token is shown only now):",
                  flush=True)
            print(f"{base}/?token={new_token}", flush=True)
        else:
            names = ", ".join(sorted(tokens))
            print(f"sign in at {base}/ with your console token ({names}); lost it?"
                  " clawtower console --web --rotate-token [--by NAME]", flush=True)

    try:
        await server.run(stop, ready)
    except OSError as exc:
        sys.stderr.write(f"clawtower: error: {bind_error(exc, host, port)}\n")
        return 1
    return 0


def bind_error(exc: OSError, host: str, port: int) -> str:
    """Why listening on host:port failed, naming the option at fault: --port for a port in
    use or not ours to take, --host for a name that does not resolve or an address this
    machine does not have."""
    import errno
    import socket

    why = exc.strerror or str(exc)
    if isinstance(exc, socket.gaierror) or exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
        return f"--host {host}: {why}"
    if exc.errno in (errno.EADDRINUSE, errno.EACCES):
        return f"--port {port}: {why}"
    return f"--host {host} --port {port}: {why}"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _given(value: T | None, default: T) -> T:
    return default if value is None else value
