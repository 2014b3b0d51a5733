"""`clawtower acp ...`: external coding harnesses over the Agent Client Protocol (core/acp).

    acp agents [--json] [--config F] [--no-probe]   configured harnesses: reachable? protocol
    acp run AGENT PROMPT [--cwd DIR] [--json]       one prompt turn; text streams to stdout
    acp runs [--json]   acp show RUN [--json]       runs; one run's tool calls, plan, diffs
    acp cancel RUN                                  session/cancel (from any process)
    acp answer APPROVAL OPTION_ID                   answer a permission request exactly
    acp rules [--all] [--json]   acp revoke RULE    the remembered "always" answers

A permission request waits in `clawtower approvals` (and console mode 2): `clawtower approve
ID [--always]` / `reject ID [--always]` answer it from any process.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from . import output
from .common import add_config_option, db_parent, nothing_yet, operator_name, with_store

if TYPE_CHECKING:
    from clawtower.core.store import Store


BY = "who (default: $CLAWTOWER_OPERATOR, else your login)"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    a = subparsers.add_parser("acp", help="coding harnesses over the Agent Client Protocol")
    sub = a.add_subparsers(dest="acp_cmd", metavar="SUBCOMMAND", required=True)
    c = db_parent()
    ag = sub.add_parser("agents", help="configured harnesses: reachable or not, protocol",
                        parents=[c])
    add_config_option(ag)
    ag.add_argument("--json", action="store_true", help="print a JSON list")
    ag.add_argument("--no-probe", action="store_true",
                    help="list only; do not start each harness to ask `initialize`")
    ag.set_defaults(handler=cmd_agents)
    r = sub.add_parser("run", help="run one prompt turn of AGENT", parents=[c])
    add_config_option(r)
    r.add_argument("agent", help="a harness of `acp_agents:` in clawtower.yaml")
    r.add_argument("prompt", help="what the harness should do")
    r.add_argument("--cwd", default=None, metavar="DIR",
                   help="the workspace (default: the harness's cwd, else this directory)")
    r.add_argument("--json", action="store_true", help="print the outcome as JSON")
    r.set_defaults(handler=cmd_run)
    rs = sub.add_parser("runs", help="ACP runs, newest first", parents=[c])
    rs.add_argument("--json", action="store_true", help="print a JSON list")
    rs.set_defaults(handler=cmd_runs)
    sh = sub.add_parser("show", help="one run: tool calls, plan, diffs, permissions",
                        parents=[c])
    sh.add_argument("run", help="the run (see `clawtower acp runs`)")
    sh.add_argument("--json", action="store_true", help="print JSON")
    sh.set_defaults(handler=cmd_show)
    ca = sub.add_parser("cancel", help="cancel a running turn (session/cancel)", parents=[c])
    ca.add_argument("run", help="the running run (see `clawtower acp runs`)")
    ca.add_argument("--by", default=None, metavar="NAME", help=BY)
    ca.set_defaults(handler=cmd_cancel)
    an = sub.add_parser("answer", help="answer a permission request with one of its options",
                        parents=[c])
    an.add_argument("approval", help="the pending request (see `clawtower approvals`)")
    an.add_argument("option", help="an option id the harness offered (see `acp show`)")
    an.add_argument("--by", default=None, metavar="NAME", help=BY)
    an.add_argument("--reason", default="", help="why (recorded with the decision)")
    an.set_defaults(handler=cmd_answer)
    ru = sub.add_parser("rules", help="remembered 'always' answers", parents=[c])
    ru.add_argument("--all", action="store_true", help="include revoked ones")
    ru.add_argument("--json", action="store_true", help="print a JSON list")
    ru.set_defaults(handler=cmd_rules)
    rv = sub.add_parser("revoke", help="revoke an 'always' rule", parents=[c])
    rv.add_argument("rule", help="the rule (see `clawtower acp rules`)")
    rv.add_argument("--by", default=None, metavar="NAME", help=BY)
    rv.add_argument("--reason", default="", help="why (recorded with the revocation)")
    rv.set_defaults(handler=cmd_revoke)


async def cmd_agents(args: argparse.Namespace) -> int:
    import asyncio  # here, not at import: `clawtower --help` loads no event loop machinery

    from clawtower.core.acp.bridge import probe
    from clawtower.core.acp.config import load_harnesses

    found = load_harnesses(args.config)
    if args.no_probe:
        rows: list[dict[str, Any]] = [
            {"name": name, "command": h.argv(), "reachable": None, "protocol_version": None,
             "agent": {}, "error": ""} for name, h in sorted(found.items())]
    else:  # all at once: a hung harness costs its init_timeout_s, not the sum
        rows = list(await asyncio.gather(*(probe(h) for _, h in sorted(found.items()))))
    if args.json:
        output.emit_json(rows)
        return 0
    if not rows:
        print("no ACP agents configured (add `acp_agents:` to clawtower.yaml)")
        return 0
    print(output.table([[r["name"], "-" if r["reachable"] is None else
                         "yes" if r["reachable"] else "no",
                         str(r["protocol_version"] or "-"),
                         " ".join(str(r["agent"].get(k, "")) for k in ("name", "version")).strip()
                         or "-", r["error"] or " ".join(r["command"])] for r in rows],
                       ["AGENT", "REACHABLE", "PROTOCOL", "REPORTS", "COMMAND / ERROR"]))
    return 0


async def _follow(store: Store, run_id: str, after: int) -> None:
    """Tool calls and permission requests of the run, as they happen (to stderr)."""
    seq = after
    while True:
        rows = await store.fetchall(
            "SELECT seq, type, entity_id, payload FROM events WHERE seq > ? ORDER BY seq",
            (seq,))
        for r in rows:
            seq = r["seq"]
            p = json.loads(r["payload"])
            if r["type"] == "acp.tool_call" and r["entity_id"] == run_id:
                what = p.get("title") or ""
                print(f"\n[tool {p['call_id']}] {p.get('kind') or ''} {what}"
                      f" {p.get('status') or ''}".rstrip(), file=sys.stderr)
            elif r["type"] == "acp.permission_requested" and p.get("run_id") == run_id:
                print(f"\n[permission] {r['entity_id']}: {p['tool_kind']} {p['title']}"
                      f" - waiting: `clawtower approve {r['entity_id']}` or `reject`",
                      file=sys.stderr)
        await store.wait_for_change(seq, 1.0)


async def cmd_run(args: argparse.Namespace) -> int:
    from clawtower.core.acp.bridge import AcpTurn, recover
    from clawtower.core.acp.config import harness

    h = harness(args.agent, args.config)  # a bad name fails before the store opens

    def stream(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    async def run(store: Store) -> int:
        import asyncio
        import contextlib

        await recover(store)
        turn = AcpTurn(store, h, args.prompt, workspace=args.cwd, actor=f"acp:{h.name}",
                       on_text=None if args.json else stream)
        follower = asyncio.create_task(_follow(store, turn.run_id, await store.last_seq()))
        try:
            out = await turn.run()
        finally:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
        if args.json:
            output.emit_json({"run": out.run_id, "status": out.status,
                              "stop_reason": out.stop_reason, "text": out.text,
                              "error": out.error, "protocol_version": out.protocol_version,
                              "permissions": out.permissions})
        else:
            print()
            print(f"{out.run_id}: {out.status} ({out.stop_reason})"
                  + (f": {out.error}" if out.error else ""), file=sys.stderr)
        return 0 if out.ok else 1

    return await with_store(args, run)


async def cmd_runs(args: argparse.Namespace) -> int:
    async def run(store: Store) -> int:
        rows = await store.fetchall(
            "SELECT id, harness, subject, workspace, status, stop_reason, error, started_at,"
            " ended_at FROM acp_runs ORDER BY started_at DESC LIMIT 500")
        if args.json:
            output.emit_json(rows)
        elif not rows:
            nothing_yet("ACP runs", "`clawtower acp run AGENT TEXT` starts one")
        else:
            print(output.table([[r["id"], r["harness"], r["status"], r["stop_reason"] or "-",
                                 r["subject"] or "-", output.ts(r["started_at"]),
                                 (r["error"] or "")[:60]] for r in rows],
                               ["RUN", "AGENT", "STATUS", "STOP", "SUBJECT", "STARTED",
                                "ERROR"]))
        return 0

    return await with_store(args, run, read_only=True)


async def cmd_show(args: argparse.Namespace) -> int:
    from clawtower.core.acp.views import run_detail

    async def run(store: Store) -> int:
        d = await run_detail(store, args.run)
        if args.json:
            output.emit_json(d)
            return 0
        r = d["run"]
        print(f"{r['id']}  {r['harness']}  {r['status']} ({r['stop_reason'] or '-'})"
              f"  workspace {r['workspace']}" + (f"  subject {r['subject']}"
                                                 if r["subject"] else ""))
        if r["error"]:
            print(f"error: {r['error']}")
        print(f"prompt: {r['prompt']}")
        for t in d["tool_calls"]:
            print(f"  tool {t['call_id']}: {t['kind']} {t['title']} [{t['status']}]"
                  + (f" {', '.join(t['locations'])}" if t["locations"] else ""))
        for p in d["permissions"]:
            print(f"  permission {p['approval_id']}: {p['tool_kind']} {p['title']} ->"
                  f" {p['status'] if p['status'] == 'pending' else p['option_id'] or p['outcome']}"
                  + (f" by {p['answered_by']}" if p["answered_by"] else ""))
        for e in d["evidence"]:
            body = e["body"]
            if e["kind"] == "plan":
                for entry in body["entries"]:
                    print(f"  plan [{entry.get('status')}] {entry.get('content')}")
            else:
                print(f"  diff {body.get('path')}")
        print(r["text"])
        return 0

    return await with_store(args, run, read_only=True)


async def cmd_cancel(args: argparse.Namespace) -> int:
    from clawtower.core.acp.bridge import request_cancel

    by = args.by or operator_name()

    async def run(store: Store) -> int:
        await store.execute(lambda tx: request_cancel(tx, args.run, by))
        print(f"{args.run}: cancel requested by {by}")
        return 0

    return await with_store(args, run)


async def cmd_answer(args: argparse.Namespace) -> int:
    from clawtower.core.acp.permissions import decide

    by = args.by or operator_name()

    async def run(store: Store) -> int:
        r = await store.execute(lambda tx: decide(tx, args.approval, by=by,
                                                  option_id=args.option, reason=args.reason))
        print(f"{args.approval}: answered {r['option_id']} ({r['option_kind']}) by {by}"
              + (f"; remembered as rule {r['rule_id']}" if r.get("rule_id") else ""))
        return 0

    return await with_store(args, run)


async def cmd_rules(args: argparse.Namespace) -> int:
    async def run(store: Store) -> int:
        rows = await store.fetchall(
            "SELECT * FROM acp_rules" + ("" if args.all else " WHERE active=1")
            + " ORDER BY created_at")
        if args.json:
            output.emit_json(rows)
        elif not rows:
            nothing_yet("rules")
        else:
            print(output.table([[r["id"], r["decision"], r["harness"], r["tool_kind"],
                                 r["workspace"], r["created_by"], output.ts(r["created_at"]),
                                 "active" if r["active"] else f"revoked by {r['revoked_by']}"]
                                for r in rows],
                               ["RULE", "ANSWER", "AGENT", "KIND", "WORKSPACE", "BY", "WHEN",
                                "STATE"]))
        return 0

    return await with_store(args, run, read_only=True)


async def cmd_revoke(args: argparse.Namespace) -> int:
    from clawtower.core.acp.permissions import revoke_rule

    by = args.by or operator_name()

    async def run(store: Store) -> int:
        await store.execute(lambda tx: revoke_rule(tx, args.rule, by, args.reason))
        print(f"{args.rule}: revoked by {by}")
        return 0

    return await with_store(args, run)
