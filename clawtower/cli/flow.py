"""`clawtower flow ...`: recursive task DAGs delegated between agents through mailboxes
(core/flows, seed 003 Clawflow). Same core API as the console's Flows mode (key 7).

    flow run AGENT TASK [--wait] [--split] [--context JSON] [--max-depth N] ...
    flow list [--status S] [--json]           flow show ID [--json | --markdown]
    flow cancel ID [--reason R]               flow mailbox AGENT [--box B] [--flow ID] [--json]
    flow export ID DIR                        flow work [--until-idle]   (the engine alone)
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from clawtower.core.errors import ClawError, NotFound, ValidationError

from . import output
from .common import add_config_option, db_parent, drive_engine, nothing_yet
from .stores import cli_store

if TYPE_CHECKING:
    from clawtower.core.agents.config import ClawtowerConfig
    from clawtower.core.store import Store

READ_ONLY = ("list", "show", "mailbox", "export")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    f = subparsers.add_parser("flow", help="task DAGs delegated between agents (README, Flows)")
    f.set_defaults(handler=cmd_flow)
    sub = f.add_subparsers(dest="flow_cmd", metavar="ACTION", parser_class=type(f),
                           required=True)
    c = db_parent()
    add_config_option(c)
    r = sub.add_parser("run", help="give TASK to AGENT; prints the flow id", parents=[c])
    r.add_argument("agent", metavar="AGENT", help="the root agent (an agent spec name)")
    r.add_argument("task", metavar="TASK", help="what to do ('-' reads stdin)")
    r.add_argument("--wait", action="store_true",
                   help="drive the flow here until it ends and print its result")
    r.add_argument("--root-id", dest="name", default="root", metavar="ID",
                   help="the root task's id (default root; simulator scripts key on it)")
    r.add_argument("--split", action="store_true",
                   help="the root agent must decompose (it cannot answer alone)")
    r.add_argument("--context", dest="args_json", metavar="JSON",
                   help="a JSON object passed down to the root agent")
    r.add_argument("--max-depth", type=int, default=6, metavar="N",
                   help="levels of decomposition below the root (default 6)")
    r.add_argument("--max-width", type=int, default=50, metavar="N",
                   help="subtasks in one decomposition (default 50)")
    r.add_argument("--max-nodes", type=int, default=10_000, metavar="N",
                   help="tasks in the flow (default 10000)")
    r.add_argument("--timeout", type=float, default=3600.0, metavar="S",
                   help="with --wait: give up after S seconds (exit 1)")
    r.add_argument("--json", action="store_true", help="with --wait: print the flow as JSON")
    r.add_argument("--executor", default="", metavar="EXECUTOR",
                   help="who runs every executed node: builtin (the turn loop) or acp:NAME (a"
                        " harness of clawtower.yaml's acp_agents); default: each agent's spec")
    ls = sub.add_parser("list", help="flows, newest first", parents=[c])
    ls.add_argument("--status", metavar="S", help="only running|done|failed|cancelled")
    ls.add_argument("--json", action="store_true", help="print a JSON list")
    sh = sub.add_parser("show", help="a flow's DAG, progress and results", parents=[c])
    sh.add_argument("id", metavar="ID", help="a flow id (F-1) or a task id (F-1/root/b)")
    g = sh.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="print the flow and its tasks as JSON")
    g.add_argument("--markdown", action="store_true",
                   help="print the task as the seed's task.md (the root's for a flow id)")
    ca = sub.add_parser("cancel", help="cancel a running flow and its open tasks",
                        parents=[c])
    ca.add_argument("id", metavar="ID", help="the flow")
    ca.add_argument("--reason", default="", help="why (recorded)")
    rr = sub.add_parser("rerun", help="a new flow from NODE: reuses every reply not downstream"
                        " of it (README, Going back)", parents=[c])
    rr.add_argument("node", metavar="NODE", help="the task to run again, e.g. F-1/root/research")
    rr.add_argument("--instruction", metavar="TEXT", help="the node's edited instruction")
    rr.add_argument("--wait", action="store_true",
                    help="drive the new flow here until it ends and print its result")
    rr.add_argument("--timeout", type=float, default=3600.0, metavar="S",
                    help="with --wait: give up after S seconds (exit 1)")
    rr.add_argument("--json", action="store_true", help="with --wait: print the flow as JSON")
    mb = sub.add_parser("mailbox", help="an agent's inbox, outbox or archive", parents=[c])
    mb.add_argument("agent", metavar="AGENT", help="the agent")
    mb.add_argument("--box", default="inbox", choices=["inbox", "outbox", "archive"],
                    help="which box (default inbox)")
    mb.add_argument("--flow", dest="entity", metavar="ID", help="only this flow's messages")
    mb.add_argument("--limit", type=int, default=200, metavar="N", help="at most N (200)")
    mb.add_argument("--json", action="store_true", help="print a JSON list")
    ex = sub.add_parser("export", help="write the seed's tasks/ and mailbox/ files",
                        parents=[c])
    ex.add_argument("id", metavar="ID", help="the flow")
    ex.add_argument("dir", metavar="DIR", help="where (inside the current directory or"
                    " $CLAWTOWER_HOME); one folder per agent")
    w = sub.add_parser("work", help="run the flow engine (ctrl+c stops)", parents=[c])
    w.add_argument("--until-idle", action="store_true",
                   help="exit once no flow has work left")
    w.add_argument("--concurrency", type=int, default=32, metavar="N",
                   help="agent turns at once (default 32)")


def _config(args: argparse.Namespace) -> ClawtowerConfig:
    from clawtower.core.agents.config import load_config

    return load_config(getattr(args, "config", None))


def _limits(args: argparse.Namespace) -> Any:
    from clawtower.core.flows.plan import FlowLimits
    from clawtower.core.limits import check_int

    for opt, v in (("--max-depth", args.max_depth), ("--max-width", args.max_width),
                   ("--max-nodes", args.max_nodes)):
        check_int(v, f"flow run: {opt}", 1, 1_000_000)
    return FlowLimits(max_depth=args.max_depth, max_width=args.max_width,
                      max_nodes=args.max_nodes)


def _executor(args: argparse.Namespace) -> str:
    """--executor, checked before anything is written (a harness must be configured)."""
    value: str = args.executor
    if value.startswith("acp:"):
        from clawtower.core.acp.config import harness

        try:
            harness(value[4:], getattr(args, "config", None))
        except ValidationError as exc:
            raise ValidationError(f"flow run: --executor: {exc}") from None
    elif value not in ("", "builtin"):
        raise ValidationError(f"flow run: --executor: {value!r} is not builtin or acp:NAME")
    return value


def _context(args: argparse.Namespace) -> dict[str, Any] | None:
    if not args.args_json:
        return None
    from clawtower.core.limits import parse_json

    value = parse_json(args.args_json, "--context")
    if not isinstance(value, dict):
        raise ValidationError("flow run: --context: must be a JSON object")
    return value


async def cmd_flow(args: argparse.Namespace) -> int:
    fc = args.flow_cmd
    if fc == "list":
        return await _list(args)
    read_only = fc in READ_ONLY
    cfg = _config(args) if fc in ("run", "work", "rerun") else None
    extra: dict[str, Any] = {}
    if fc == "run":
        text: str = sys.stdin.read() if args.task == "-" else args.task
        if not text.strip():
            raise ValidationError("flow run: TASK is empty")
        extra = {"text": text, "limits": _limits(args), "context": _context(args),
                 "executor": _executor(args)}
    if fc == "export":
        from .boundary import confined_dir

        extra["dir"] = confined_dir(args.dir, "DIR")
    if fc == "work" and args.concurrency < 1:
        raise ValidationError("flow work: --concurrency: must be at least 1")

    async def run(store: Store) -> int:
        from clawtower.core.flows.service import Flows

        flows = Flows(store)
        if fc == "run":
            from .common import operator_name

            fid = await flows.start(args.agent, extra["text"], context=extra["context"],
                                    split=args.split, by=operator_name(),
                                    limits=extra["limits"], root_id=args.name,
                                    executor=extra["executor"], cfg=cfg)
            if not args.wait:
                print(fid)
                return 0
            assert cfg is not None
            sys.stderr.write(f"{fid}: started\n")
            return await _wait(store, cfg, fid, args)
        if fc == "rerun":
            from clawtower.core.flows.rerun import rerun_flow

            fid = await rerun_flow(store, args.node, args.instruction, by=_operator())
            if not args.wait:
                print(fid)
                return 0
            assert cfg is not None
            sys.stderr.write(f"{fid}: rerun of {args.node}\n")
            return await _wait(store, cfg, fid, args)
        if fc == "show":
            return await _show(flows, args)
        if fc == "cancel":
            await flows.cancel(args.id, by=_operator(), reason=args.reason)
            print(f"{args.id}: cancelled")
            return 0
        if fc == "mailbox":
            from clawtower.core.limits import check_int

            check_int(args.limit, "flow mailbox: --limit", 1, 100_000)
            rows = await flows.mailbox(args.agent, args.box, args.entity, args.limit)
            if args.json:
                output.emit_json([{**r, "context": json.loads(r["context"] or "{}")}
                                  for r in rows])
            elif not rows:
                print(f"{args.agent}: {args.box} is empty")
            else:
                print(output.table([_msg_row(r) for r in rows],
                                   ["SEQ", "KIND", "FROM", "TO", "TASK", "STATUS", "BODY"]))
            return 0
        if fc == "export":
            from clawtower.core.flows.render import export

            written = await export(flows, args.id, extra["dir"])
            print(f"{args.id}: {len(written)} files in {extra['dir']}")
            return 0
        if fc == "work":
            assert cfg is not None
            return await _work(store, cfg, args)
        raise ValidationError(f"flow: unknown action {fc!r}")

    async with cli_store(args.db, read_only=read_only) as store:
        return await run(store)


async def _list(args: argparse.Namespace) -> int:
    """`flow list`: the flows' projection read alone (core/flows/reads.py), without the flow
    service or the event models (issue 39: a read command starts fast)."""
    from clawtower.core.flows.reads import flows_listing

    async with cli_store(args.db, read_only=True) as store:
        rows = await flows_listing(store, args.status)
    if args.json:
        output.emit_json(rows)
    elif not rows:
        nothing_yet("flows", "`clawtower flow run AGENT TEXT` starts one")
    else:
        print(output.table([_row(r) for r in rows], HEAD))
    return 0


def _operator() -> str:
    from .common import operator_name

    return operator_name()


async def _wait(store: Store, cfg: ClawtowerConfig, fid: str, args: argparse.Namespace
                ) -> int:
    """Drive the flow on the engine `serve` runs, with its flows worker for this flow only,
    until nothing of the flow can still move (another engine holding the flows' lease is
    waited for while it drives the flow)."""
    from clawtower.core.flows.service import Flows
    from clawtower.core.workers import build_engine

    composed = build_engine(store, None, workers=["flows"], config=cfg,
                            flow_kw={"flows": {fid}})
    await drive_engine(composed, True, timeout_s=args.timeout, signals=False)
    got = await Flows(store).get(fid)
    flow = got["flow"]
    if args.json:
        output.emit_json(got)
    elif flow["status"] == "done":
        print(flow["result"])
    sys.stderr.write(f"{fid} · {flow['status']} · {flow['done']}/{flow['nodes']} tasks done ·"
                     f" {flow['tokens']} tokens\n")
    if flow["status"] == "running":
        raise ClawError(f"flow {fid!r}: still running after {args.timeout:g} s (--timeout)"
                        + await _waits_on(store, fid))
    if flow["status"] != "done":
        raise ClawError(f"flow {fid!r}: {flow['status']}: {flow['error'] or '-'}")
    return 0


async def _waits_on(store: Store, fid: str) -> str:
    """'; F-3 waits on approval 1a2b3c4d: clawtower approve 1a2b3c4d' when a turn of one of
    the flow's sessions stopped at a tool call that needs an approval (why the flow does not
    move), else ''."""
    rows = await store.fetchall(
        "SELECT id FROM approvals WHERE status='pending' AND subject IN (SELECT id FROM"
        " sessions WHERE created_by=?) ORDER BY seq", (f"flow:{fid}",))
    if not rows:
        return ""
    ids = [str(r["id"]) for r in rows]
    more = f" (and {len(ids) - 1} more: clawtower approvals)" if len(ids) > 1 else ""
    return f"; {fid} waits on approval {ids[0]}: clawtower approve {ids[0]}{more}"


async def _work(store: Store, cfg: ClawtowerConfig, args: argparse.Namespace) -> int:

    from clawtower.core.workers import FlowsWorker, build_engine

    # the engine `serve` runs, with its flows worker only (whose nodes' turn jobs run on a
    # session worker of its own)
    composed = build_engine(store, None, workers=["flows"], config=cfg,
                            flow_kw={"concurrency": args.concurrency})
    worker = composed.get("flows")
    assert isinstance(worker, FlowsWorker)
    engine = worker.flows
    print(f"clawtower: flow engine {engine.owner} on {store.path}; ctrl+c stops", flush=True)
    ok = await drive_engine(composed, args.until_idle)
    print(f"{engine.handled} agent turn(s) run", flush=True)
    return 0 if ok and worker.ok else 1


HEAD = ["ID", "STATUS", "AGENT", "TASKS", "DONE", "TOKENS", "TASK"]


def _row(r: dict[str, Any]) -> list[str]:
    return [r["id"], r["status"], r["agent"], str(r["nodes"]), str(r["done"]),
            str(r["tokens"]), r["instruction"].splitlines()[0] if r["instruction"] else "-"]


def _msg_row(r: dict[str, Any]) -> list[str]:
    body = " ".join(str(r["body"]).split())
    if r.get("reason"):
        body = f"(ignored: {r['reason']})"
    return [str(r["seq"]), r["kind"], r["from_agent"], r["to_agent"], r["task_id"],
            r["status"], body]


def tree_lines(tasks: list[dict[str, Any]]) -> list[str]:
    from clawtower.core.flows.render import duration

    out = []
    for t in tasks:
        depth = int(t["depth"])
        what = t["result"] if t["status"] == "done" else t["error"] or ""
        what = " ".join(str(what).split())
        status = f"{t['status']}, reused" if t.get("mode") == "reused" else t["status"]
        out.append(f"{'  ' * depth}{'└ ' if depth else ''}{t['local_id']} [{status}]"
                   f" {t['agent']} · {duration(t)} · {t['tokens']} tok"
                   + (f" · {what[:70]}" if what else ""))
    return out


async def _show(flows: Any, args: argparse.Namespace) -> int:
    from clawtower.core.flows.render import task_md

    flow_id, slash, task = args.id.partition("/")
    if not flow_id.strip() or (slash and not task.strip()) or any(
            part in ("", ".", "..") for part in task.split("/") if slash):
        raise ValidationError(f"flow show: ID {args.id!r}: expected FLOW or FLOW/TASK"
                              " (a task id, not a path)")
    if slash:  # the error names what was given, not only its flow part
        try:
            got = await flows.get(flow_id)
        except NotFound:
            raise NotFound(f"flow {args.id!r}: no such flow {flow_id!r}") from None
    else:
        got = await flows.get(flow_id)
    flow, tasks = got["flow"], got["tasks"]
    if slash and args.id not in {t["task_id"] for t in tasks}:
        raise NotFound(f"flow task {args.id!r}: no such task in flow {flow_id!r}")
    if args.markdown:
        task_id = args.id if "/" in args.id else flow["root_task"]
        if task_id not in {t["task_id"] for t in tasks}:
            raise ValidationError(f"flow task {task_id!r}: no such task in flow {flow_id!r}")
        print(task_md(flow, tasks, task_id))
        return 0
    if args.json:
        output.emit_json(got)
        return 0
    lines = [f"{flow['id']}: {flow['instruction']}",
             f"  status: {flow['status']} · agent: {flow['agent']} · tasks:"
             f" {flow['done']}/{flow['nodes']} done · {flow['tokens']} tokens"
             + (f" · {flow['ignored']} ignored message(s)" if flow["ignored"] else "")]
    from clawtower.core.flows.rerun import rerun_origin

    origin = await rerun_origin(flows.store, flow["id"])
    if origin:
        lines.append(f"  rerun of {origin['node']} (by {origin['by']}): the [reused] replies"
                     f" are {origin['flow']}'s")
    if flow["result"]:
        lines.append(f"  result: {flow['result']}")
    if flow["error"]:
        lines.append(f"  error: {flow['error']}")
    lines.append("tasks:")
    lines += ["  " + x for x in tree_lines(tasks)]
    print("\n".join(lines))
    return 0


__all__ = ["cmd_flow", "register", "tree_lines"]
