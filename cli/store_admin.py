"""`clawtower store`: check or rebuild the store's projections, or describe the store."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from .common import with_store

if TYPE_CHECKING:
    from core.store import SQLiteStore


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    st = subparsers.add_parser("store", help="check or rebuild the store's projections")
    ssub = st.add_subparsers(dest="store_cmd", metavar="ACTION",
                             required=True)
    ssub.add_parser("verify", help="replay the log and compare with live projections")
    ssub.add_parser("rebuild", help="rebuild projections from the log")
    ssub.add_parser("info", help="schema version, events, size")
    st.set_defaults(handler=cmd_store)


async def cmd_store(args: argparse.Namespace) -> int:
    async def run(store: SQLiteStore) -> int:
        if args.store_cmd == "verify":
            problems = await store.verify_projections()
            for p in problems:
                print(p)
            print("projections match the log" if not problems else
                  f"{len(problems)} projection(s) differ from the log")
            return 0 if not problems else 1
        if args.store_cmd == "rebuild":
            n = await store.rebuild_projections()
            print(f"rebuilt projections from {n} events")
            return 0
        row = await store.fetchone("PRAGMA user_version")
        db = Path(args.db)  # not store.path: with no file at --db, that is an empty stand-in
        print(f"store: {args.db}\nschema: v{next(iter(row.values())) if row else '?'}\n"
              f"events: {await store.last_seq()}\n"
              f"size: {db.stat().st_size if db.exists() else 0} bytes")
        return 0

    # even rebuild: a missing store has no projections to rebuild, and must not be created
    return await with_store(args, run, read_only=True)
