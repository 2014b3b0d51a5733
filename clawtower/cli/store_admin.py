"""`clawtower store`: check, rebuild or repair the store's projections, or describe it."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clawtower.core.errors import ValidationError

from .common import operator_name, with_store
from .stores import cli_store, is_postgres_url

if TYPE_CHECKING:
    from clawtower.core.store import Store


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    st = subparsers.add_parser("store", help="check or rebuild the store's projections")
    ssub = st.add_subparsers(dest="store_cmd", metavar="ACTION",
                             required=True)
    ssub.add_parser("verify", help="replay the log and compare with live projections")
    ssub.add_parser("rebuild", help="rebuild projections from the log")
    ssub.add_parser("repair", help="replace values no reader can use (an expiry of Infinity"
                    " or 1e308, imported by releases before the store refused them) by one"
                    " recorded event, so that verify is clean")
    ssub.add_parser("info", help="schema version, events, size")
    cp = ssub.add_parser("copy", help="copy the log into a new store (SQLite <-> PostgreSQL)"
                         " and rebuild its projections")
    cp.add_argument("--from", dest="source", required=True, metavar="URL",
                    help="the store to copy: a file path or postgresql://…")
    cp.add_argument("--to", dest="target", required=True, metavar="URL",
                    help="a new, empty store: a file path or postgresql://…")
    for name, text in (("pg-start", "start a local PostgreSQL server (pgserver) with its data"
                        " in DIR and print its URL"),
                       ("pg-stop", "stop the local PostgreSQL server of DIR")):
        sp = ssub.add_parser(name, help=text)
        sp.add_argument("dir", metavar="DIR",
                        help="the server's data folder (created by pg-start if missing)")
    st.set_defaults(handler=cmd_store)


async def cmd_store(args: argparse.Namespace) -> int:
    if args.store_cmd in ("pg-start", "pg-stop"):
        from clawtower.core.store import pglocal

        if args.store_cmd == "pg-stop":
            pglocal.stop(args.dir)
            print(f"stopped the PostgreSQL server of {args.dir}")
            return 0
        url = pglocal.start(args.dir)
        print(url)
        sys.stderr.write("clawtower: the server keeps running; use it with --db "
                         f"'{url}' (or CLAWTOWER_DB), stop it with `clawtower store pg-stop "
                         f"{args.dir}`\n")
        return 0
    if args.store_cmd == "copy":
        return await _copy(args.source, args.target)

    async def run(store: Store) -> int:
        if args.store_cmd == "verify":
            from clawtower.core.sessions.takeover import open_turns

            problems = await store.verify_projections()
            for p in problems:
                print(p)
            print("projections match the log" if not problems else
                  f"{len(problems)} projection(s) differ from the log")
            stuck = await open_turns(store)  # a crash must never leave a turn half-open
            for line in stuck:
                print(line)
            if stuck:
                print(f"{len(stuck)} open turn(s) with no live job (a session worker takes"
                      " their jobs over once it runs: clawtower session run)")
            return 0 if not problems and not stuck else 1
        if args.store_cmd == "rebuild":
            n = await store.rebuild_projections()
            print(f"rebuilt projections from {n} events")
            return 0
        if args.store_cmd == "repair":
            return await _repair(store)
        row = await store.fetchone("PRAGMA user_version")
        db = Path(args.db)  # not store.path: with no file at --db, that is an empty stand-in
        size = ("PostgreSQL (projections in each process's memory)" if is_postgres_url(args.db)
                else f"{db.stat().st_size if db.exists() else 0} bytes")
        from clawtower.core.store.postgres_url import redact

        name = redact(args.db) if is_postgres_url(args.db) else args.db
        print(f"store: {name}\nschema: v{next(iter(row.values())) if row else '?'}\n"
              f"events: {await store.last_seq()}\n"
              f"size: {size}")
        from clawtower.core.store.ledger import ledger_problems

        read = getattr(store, "migrations", None)  # SQLite and PostgreSQL stores keep one
        ledger: list[dict[str, Any]] = await read() if read is not None else []
        print("migrations:")
        for m in ledger:
            at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(m["applied_at"])))
            print(f"  v{m['version']} {m['name']}: {str(m['checksum'])[:12]} applied {at}")
        for p in ledger_problems(ledger):
            print(f"  problem: {p}")
        return 0

    # even rebuild: a missing store has no projections to rebuild, and must not be created
    return await with_store(args, run, must_exist=True)


async def _repair(store: Store) -> int:
    import json

    from clawtower.core.store.repair import repair

    done = await repair(store, by=operator_name())
    if done.seq is None:
        print("nothing to repair: projections match the log and hold no unusable value")
        return 0
    for p in done.differences:
        print(f"verify before the repair: {p}")
    for v in done.values:
        print(f"event {v.seq} {v.type} {v.entity_id}: {v.field} {v.was} -> {json.dumps(v.now)}")
    print(f"recorded store.repaired (event {done.seq}): {len(done.values)} value(s) replaced;"
          " the events that carried them stay in the log")
    if done.rebuilt is not None:
        print(f"rebuilt projections from {done.rebuilt} events")
    for p in done.remaining:
        print(p)
    print("projections match the log" if not done.remaining else
          f"{len(done.remaining)} projection(s) still differ from the log")
    return 0 if not done.remaining else 1


async def _copy(source: str, target: str) -> int:
    """Copy, then check both ends: the same log digest, and projections that match it."""
    from clawtower.core.errors import NotFound
    from clawtower.core.store.copy import copy_log, log_digest

    if source == target:
        raise ValidationError("store copy: --from and --to are the same store")
    async with cli_store(source, must_exist=True) as src:
        if await src.last_seq() == 0:
            raise NotFound(f"{source}: no events to copy")
        async with cli_store(target) as dst:
            n = await copy_log(src, dst)
            a, b = await log_digest(src), await log_digest(dst)
            problems = await dst.verify_projections()
    for p in problems:
        print(p)
    print(f"copied {n} events; log digest {a[1][:16]} ({a[0]} events) -> {b[1][:16]}"
          f" ({b[0]} events)")
    if a != b or problems:
        print("the copy differs from its source")
        return 1
    print("both ends agree; projections rebuilt and verified")
    return 0
