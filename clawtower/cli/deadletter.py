"""`clawtower deadletter`: the invocations that failed with `on_failure: dead_letter`."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable

from .common import db_parent, operator_name
from .stores import cli_store


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = subparsers.add_parser("deadletter", help="dead-lettered trigger invocations:"
                              " list, retry, drop")
    sub = d.add_subparsers(dest="deadletter_cmd", metavar="ACTION", parser_class=type(d),
                           required=True)
    c = [db_parent()]
    ls = sub.add_parser("list", parents=c, help="the dead-letter queue")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(handler=_list)
    r = sub.add_parser("retry", parents=c, help="send an invocation back to its queue")
    r.add_argument("id", help="invocation id (I-..., or T-... from older stores)")
    r.set_defaults(handler=_retry)
    dr = sub.add_parser("drop", parents=c, help="drop an invocation for good")
    dr.add_argument("id", help="invocation id (I-..., or T-... from older stores)")
    dr.add_argument("--reason", default="", help="why (recorded)")
    dr.set_defaults(handler=_drop)


async def _list_async(args: argparse.Namespace) -> int:
    from clawtower.core.triggers.views import dead_letters

    from .triggers import print_items

    async with cli_store(args.db, read_only=True) as store:
        rows = await dead_letters(store)
    print_items(rows, args.json, "dead-lettered invocations")
    return 0


def _list(args: argparse.Namespace) -> Awaitable[int]:
    return _list_async(args)


async def _retry_async(args: argparse.Namespace) -> int:
    from clawtower.core.limits import check_id
    from clawtower.core.triggers.views import retry_dead_letter

    check_id(args.id, "id")
    async with cli_store(args.db) as store:
        await retry_dead_letter(store, args.id, operator_name())
    print(f"{args.id}: queued again")
    return 0


def _retry(args: argparse.Namespace) -> Awaitable[int]:
    return _retry_async(args)


async def _drop_async(args: argparse.Namespace) -> int:
    from clawtower.core.limits import check_id, check_text
    from clawtower.core.triggers.views import drop_dead_letter

    check_id(args.id, "id")
    check_text(args.reason, "--reason")
    async with cli_store(args.db) as store:
        await drop_dead_letter(store, args.id, operator_name(), args.reason)
    print(f"{args.id}: dropped")
    return 0


def _drop(args: argparse.Namespace) -> Awaitable[int]:
    return _drop_async(args)
