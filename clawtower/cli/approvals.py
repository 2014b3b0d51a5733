"""`clawtower approvals|approve|reject`: the one list of pending decisions, and deciding."""

from __future__ import annotations

import argparse
from functools import partial
from typing import TYPE_CHECKING

from . import output
from .common import live_lease, nothing_yet, operator_name, with_store

if TYPE_CHECKING:
    from clawtower.core.store import Store


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    a = subparsers.add_parser("approvals", help="pending approvals, every kind, one list")
    a.add_argument("--json", action="store_true", help="print a JSON list")
    a.add_argument("--all", action="store_true", help="include decided ones")
    ap = subparsers.add_parser("approve", help="approve a pending item")
    ap.add_argument("id", help="the approval (see `clawtower approvals`)")
    ap.add_argument("--by", default=None, metavar="NAME",
                    help="who approves (default: $CLAWTOWER_OPERATOR, else your login)")
    ap.add_argument("--reason", default="", help="why (recorded with the decision)")
    ap.add_argument("--always", action="store_true",
                    help="an ACP permission request: allow this harness this kind of tool"
                         " call in this workspace from now on (see `clawtower acp rules`)")
    rj = subparsers.add_parser("reject", help="reject a pending item")
    rj.add_argument("id", help="the approval (see `clawtower approvals`)")
    rj.add_argument("--reason", default="",
                    help="why (recorded with the decision; a rejected workflow gate's run too)")
    rj.add_argument("--by", default=None, metavar="NAME",
                    help="who rejects (default: $CLAWTOWER_OPERATOR, else your login)")
    rj.add_argument("--always", action="store_true",
                    help="an ACP permission request: reject this kind of tool call of this"
                         " harness in this workspace from now on")
    a.set_defaults(handler=cmd_approvals)
    ap.set_defaults(handler=partial(cmd_decide, approve=True))
    rj.set_defaults(handler=partial(cmd_decide, approve=False))


async def cmd_approvals(args: argparse.Namespace) -> int:
    from clawtower.core.approvals import Approvals

    async def run(store: Store) -> int:
        ap = Approvals(store)
        rows = await (ap.all() if args.all else ap.pending())
        if args.json:
            output.emit_json(rows)
            return 0
        if not rows:
            return nothing_yet("approvals" if args.all else "pending approvals")
        print(output.table(
            [[r["id"], r["kind"], r["status"], r["subject"], r["requested_by"],
              output.ts(r["requested_at"]), r["title"]] for r in rows],
            ["ID", "KIND", "STATUS", "SUBJECT", "ASKED BY", "WHEN", "WHAT"]))
        return 0

    return await with_store(args, run, read_only=True)


async def cmd_decide(args: argparse.Namespace, approve: bool) -> int:
    from clawtower.core.approvals import Approvals

    async def run(store: Store) -> int:
        ap = Approvals(store)
        by = args.by or operator_name()
        if approve:
            r = await ap.approve(args.id, by=by, reason=args.reason, always=args.always)
        else:
            r = await ap.reject(args.id, by=by, reason=args.reason, always=args.always)
        print(f"{r['approval']}: {r['decision']} by {by} ({r['kind']} {r['subject']})")
        if r.get("option_id"):  # an ACP permission request: what went back to the harness
            print(f"{r['approval']}: answered {r['option_id']} ({r['option_kind']})"
                  + (f"; remembered as rule {r['rule_id']}" if r.get("rule_id") else ""))
        if r.get("kind") == "tool_call":  # a session's turn waits: a session worker resumes it
            what = f"runs {r['tool']} once" if approve else "tells the agent no"
            live = await live_lease(store, "worker:")
            print(f"{r['subject']}: queued again; " + (
                f"a running session worker resumes the turn ({what})" if live else
                f"no session worker runs now: `clawtower serve`, `clawtower session run` or"
                f" the console resumes the turn ({what})"))
        if r.get("kind") == "task_side_effect" and r["decision"] != "approved":
            print(f"{r['subject']}: failed (its side effects were refused)")
        elif r.get("kind") == "task_side_effect":  # the engine performs them: is one running?
            live = await live_lease(store, "engine:")
            print(f"{r['subject']}: ready to resume; " + (
                "a running engine performs its side effects" if live
                else "no engine runs now: `clawtower serve` (or `clawtower serve"
                     " --until-idle`) or the console performs its side effects"))
        if r.get("run_status"):  # a workflow gate: the run went on in this process
            env = r.get("envelope") or {}
            waiting = {"needs_approval": "waits at another approval",
                       "needs_input": "waits for an answer"}.get(str(env.get("status")))
            print(f"{r['subject']}: {waiting or r['run_status']}"
                  + (f" ({env['error']['message']})" if env.get("error") else ""))
        return 0

    return await with_store(args, run)

