"""`clawtower events`: print the event log, or follow it."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from . import output
from .common import nothing_yet, with_store
from .stores import wait_for_store

if TYPE_CHECKING:
    from clawtower.core.store import Store


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    e = subparsers.add_parser("events", help="print the event log")
    e.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    e.add_argument("--json", action="store_true", help="one JSON object per line")
    e.add_argument("--after", type=int, default=0, metavar="SEQ", help="start after SEQ")
    e.add_argument("--entity", metavar="ID", help="only events of this entity id")
    e.set_defaults(handler=cmd_events)


async def cmd_events(args: argparse.Namespace) -> int:
    async def run(store: Store) -> int:
        seq = args.after
        while True:
            batch = await store.events_after(seq, 1000, entity_id=args.entity)
            for e in batch:
                data = e.as_json()
                if args.json:
                    sys.stdout.write(json.dumps(data, sort_keys=True) + "\n")
                else:
                    sys.stdout.write(output.event_line(e) + "\n")
                seq = e.seq
            sys.stdout.flush()
            if len(batch) == 1000:
                continue
            if not args.follow:
                if seq == args.after and not args.json:
                    nothing_yet("events" + (f" of {args.entity}" if args.entity else "")
                                + (f" after {args.after}" if args.after else ""))
                return 0
            await store.wait_for_change(seq, 1.0)

    if args.follow:  # follow a store another process is about to create
        await wait_for_store(args.db)
    return await with_store(args, run, read_only=True)
