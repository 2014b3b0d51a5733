"""`clawtower triggers`: list (next fire, queue depth, last result), fire, history, show,
auth."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any

from .common import db_parent, nothing_yet, operator_name
from .stores import cli_store


class _Random:
    """`--token`/`--secret` with no value: make a random one (hookauth.RANDOM). A sentinel no
    argv can spell, so `--token ''` - an unset variable - is refused instead of silently
    replacing a working token with a random one."""


RANDOM = _Random()


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = subparsers.add_parser("triggers", help="expert triggers: list, fire, history, auth")
    sub = t.add_subparsers(dest="triggers_cmd", metavar="ACTION", parser_class=type(t),
                           required=True)
    c = [db_parent()]
    ls = sub.add_parser("list", parents=c, help="triggers, next fire, queue depth, last result")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(handler=_list)
    f = sub.add_parser("fire", parents=c, help="fire a trigger by hand (queued like a webhook)")
    f.add_argument("expert", help="installed expert")
    f.add_argument("trigger", help="trigger name")
    f.add_argument("--payload", default="{}", metavar="JSON", help="the event payload (object)")
    f.add_argument("--json", action="store_true", help="print JSON")
    f.set_defaults(handler=_fire)
    h = sub.add_parser("history", parents=c, help="invocations, newest first")
    h.add_argument("expert", nargs="?", help="only this expert")
    h.add_argument("trigger", nargs="?", help="only this trigger")
    h.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    h.add_argument("--json", action="store_true", help="print JSON")
    h.set_defaults(handler=_history)
    sh = sub.add_parser("show", parents=c, help="one invocation (I-..., or T-... from older"
                        " stores)")
    sh.add_argument("id", help="invocation id")
    sh.add_argument("--json", action="store_true", help="print JSON")
    sh.set_defaults(handler=_show)
    a = sub.add_parser("auth", parents=c, help="set a webhook trigger's token or HMAC secret")
    a.add_argument("expert", help="installed expert")
    a.add_argument("trigger", help="webhook trigger name")
    a.add_argument("--token", nargs="?", const=RANDOM, default=None,
                   help="bearer token (random when no value is given; a value typed here"
                   " stays in shell history: prefer --token-file)")
    a.add_argument("--secret", nargs="?", const=RANDOM, default=None,
                   help="HMAC-SHA256 secret (random when no value is given; prefer"
                   " --secret-file)")
    a.add_argument("--token-file", metavar="PATH", default=None,
                   help="read the bearer token from PATH ('-': standard input)")
    a.add_argument("--secret-file", metavar="PATH", default=None,
                   help="read the HMAC secret from PATH ('-': standard input)")
    a.add_argument("--max-bytes", type=int, default=None, help="body size limit")
    a.set_defaults(handler=_auth)


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


async def _list_async(args: argparse.Namespace) -> int:
    from clawtower.core.triggers.overview import overview

    async with cli_store(args.db, read_only=True) as store:
        rows = await overview(store)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        nothing_yet("triggers", "install an expert package that declares some")
    for r in rows:
        what = f"cron {r['expr']} {r['tz']}, next {_when(r['next_fire'])}" \
            if r["type"] == "cron" else r["type"]
        last = r["last"]
        if r["inactive"]:
            what += f" [inactive: {r['inactive']}]"
        auth = ""
        if r["type"] == "webhook":
            auth = f"; auth failures (1h) {r['auth_failures_1h']}"
            if r["auth_throttled_1h"]:
                auth += (f", throttled {r['auth_throttled_1h']}x from"
                         f" {r['auth_addresses_1h']} address(es)")
        skipped = f"; skipped duplicates {r['skipped']}" if r["skipped"] else ""
        print(f"{r['expert']}/{r['trigger']}: {what} -> {r['process']} ({r['mode']}"
              f"{', key ' + r['key'] if r['key'] else ''}); queued {r['depth']}; last "
              f"{last['status'] + ' ' + last['id'] if last else '-'}{skipped}{auth}")
        for lane, counts in sorted(r["queue"].items()):
            print(f"  {lane}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


def _list(args: argparse.Namespace) -> Awaitable[int]:
    return _list_async(args)


async def _fire_async(args: argparse.Namespace) -> int:
    from clawtower.core.limits import parse_json
    from clawtower.core.triggers.views import fire

    payload = parse_json(args.payload, "--payload", want=dict)
    async with cli_store(args.db) as store:
        out = await fire(store, args.expert, args.trigger, payload, by=operator_name())
    if args.json:
        print(json.dumps(out))
    elif out["status"] == "skipped":
        print(f"{out['id']}: skipped (duplicate of {out['duplicate_of']})")
    else:
        print(f"{out['id']}: queued")
    return 0


def _fire(args: argparse.Namespace) -> Awaitable[int]:
    return _fire_async(args)


def print_items(rows: list[dict[str, Any]], as_json: bool, none: str) -> None:
    """Trigger invocations, one a line (`none`: what to call them when there are none)."""
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    if not rows:
        nothing_yet(none)
    for r in rows:
        extra = f" run {r['run_id']}" if r.get("run_id") else ""
        err = f": {r['error']}" if r.get("error") else ""
        warn = f" [{r['warning']}]" if r.get("warning") else ""
        print(f"{r['id']} {_when(r['received_at'])} {r['expert']}/{r['trigger']}"
              f" {r['source']} {r['status']} attempt {r['attempt']}{extra}{err}{warn}")


async def _history_async(args: argparse.Namespace) -> int:
    from clawtower.core.limits import check_int
    from clawtower.core.triggers.views import history

    check_int(args.limit, "--limit", 1, 10_000)
    async with cli_store(args.db, read_only=True) as store:
        rows = await history(store, args.expert, args.trigger, args.limit)
    print_items(rows, args.json, "trigger invocations")
    return 0


def _history(args: argparse.Namespace) -> Awaitable[int]:
    return _history_async(args)


async def _show_async(args: argparse.Namespace) -> int:
    from clawtower.core.triggers.views import item

    async with cli_store(args.db, read_only=True) as store:
        row = await item(store, args.id)
    print_items([row], args.json, "trigger invocations")
    return 0


def _show(args: argparse.Namespace) -> Awaitable[int]:
    return _show_async(args)


def fingerprint(secret: str) -> str:
    """What identifies a credential without revealing it: the start of its SHA-256."""
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()[:16]


def _read_secret(path: str, option: str) -> str:
    """A credential from a file or stdin (first line, surrounding whitespace dropped)."""
    from clawtower.core.limits import MAX_SECRET_CHARS, read_secret, secret_in

    if path == "-":
        return secret_in(sys.stdin.read(MAX_SECRET_CHARS + 1), option)
    return read_secret(path, option)


def _auth(args: argparse.Namespace) -> int:
    from clawtower.core.errors import ValidationError
    from clawtower.core.experts import home
    from clawtower.core.experts.package import load_package
    from clawtower.core.limits import check_secret
    from clawtower.core.triggers import hookauth
    from clawtower.core.triggers.spec import triggers_of

    pkg = load_package(home.package_dir(args.expert))
    spec = next((s for s in triggers_of(pkg) if s.name == args.trigger), None)
    if spec is None or spec.type != "webhook":
        raise ValidationError(f"{args.expert}: no webhook trigger {args.trigger!r}")
    if args.token_file == "-" and args.secret_file == "-":
        raise ValidationError("--token-file and --secret-file cannot both read stdin")
    for given, file, name in ((args.token, args.token_file, "token"),
                              (args.secret, args.secret_file, "secret")):
        if given is not None and file is not None:
            raise ValidationError(f"give --{name} or --{name}-file, not both")
    for given, option in ((args.token, "--token"), (args.secret, "--secret")):
        if isinstance(given, str):  # typed (RANDOM: none given, make one)
            check_secret(given, option)
    token = _read_secret(args.token_file, "--token-file") if args.token_file else \
        hookauth.RANDOM if args.token is RANDOM else args.token
    secret = _read_secret(args.secret_file, "--secret-file") if args.secret_file else \
        hookauth.RANDOM if args.secret is RANDOM else args.secret
    if token is None and secret is None and args.max_bytes is None:
        raise ValidationError("give --token and/or --secret (or their -file forms, or"
                              " --max-bytes)")
    auth = hookauth.write(args.expert, args.trigger, token=token, secret=secret,
                          max_bytes=args.max_bytes)
    path = hookauth.hooks_file(args.expert)
    # never the credential itself (terminals, CI logs): a fingerprint the sender can match
    for name, asked, value in (("token", token, auth.token), ("secret", secret, auth.secret)):
        if asked is not None and value is not None:
            made = " (random: read it from the file below)" \
                if asked is hookauth.RANDOM else ""
            print(f"{name}: {fingerprint(value)}{made}")
    sys.stderr.write(f"written to {path}\n")
    return 0
