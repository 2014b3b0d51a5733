"""`clawtower session ...`: sessions, steering and subagents (core/sessions). Same core API
as the console. (`agents spec ...` is cli/agent_specs.py.)

    session new [--agent A] [--model P/M] [--title T] [--channel C] [--deliver]
    session list|tree [ID] [--json]          session show ID [--json]
    session send ID TEXT [--no-wait]         (a /command is run, not sent)
    session steer ID TEXT                    (queued for the running turn's next boundary)
    session stop ID [--reason R]             session spawn ID TASK [--agent A] [--no-wait]
    session resume ID                        (a task its max_tool_rounds stopped goes on)
    session history ID [--json]              its turns: message, tool calls, tokens, reply
    session fork ID --at N [--message TEXT] [--agent A] [--reason R] [--no-wait] [--json]
    session run [--until-idle]               the worker, without a console
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clawtower.core.errors import ClawError, ValidationError

from . import output
from .common import add_config_option, db_parent, drive_engine, nothing_yet
from .stores import cli_store

if TYPE_CHECKING:
    from clawtower.core.agents.config import ClawtowerConfig
    from clawtower.core.sessions.reads import SessionReads
    from clawtower.core.store import Store



def _common() -> argparse.ArgumentParser:
    c = db_parent()
    add_config_option(c)
    return c


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = subparsers.add_parser("session",
                              help="sessions: messages, steering, subagents (README, Sessions)")
    s.set_defaults(handler=cmd_session)
    sub = s.add_subparsers(dest="session_cmd", metavar="ACTION", parser_class=type(s),
                           required=True)
    c = [_common()]
    n = sub.add_parser("new", help="create a session; prints its id", parents=c)
    n.add_argument("--agent", metavar="REF", help="agent spec id or name (default: 'default')")
    n.add_argument("--model", metavar="PROVIDER/MODEL", help="model override")
    n.add_argument("--title", default="", help="a title shown in listings and the console")
    n.add_argument("--channel", default="cli", help="route (default cli; 'agent' is internal)")
    n.add_argument("--deliver", action="store_true",
                   help="deliver replies to the channel (never on the internal channel)")
    n.add_argument("--json", action="store_true", help="print the new session as JSON")
    ls = sub.add_parser("list", help="every session", parents=c)
    ls.add_argument("--json", action="store_true", help="print a JSON list")
    t = sub.add_parser("tree", help="sessions as parent -> children", parents=c)
    t.add_argument("id", nargs="?", metavar="ID", help="only this session's subtree")
    t.add_argument("--json", action="store_true", help="print the tree as JSON")
    sh = sub.add_parser("show", help="transcript, backlog, announces, jobs, children",
                        parents=c)
    sh.add_argument("id", metavar="ID", help="the session")
    sh.add_argument("--json", action="store_true", help="print the session as JSON")
    for name, help_ in (("send", "send a message (or run a /command) and wait for the reply"),
                        ("steer", "send to a busy session: taken at its next safe boundary")):
        p = sub.add_parser(name, help=help_, parents=c)
        p.add_argument("id", metavar="ID", help="the session")
        p.add_argument("text", metavar="TEXT", help="the message ('-' reads stdin)")
        p.add_argument("--no-wait", action="store_true",
                       help="queue it and return (a worker elsewhere runs the turn)")
        p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                       help="give up waiting after S seconds (exit 1)")
    hi = sub.add_parser("history", help="a session's turns (message, tool calls, tokens,"
                        " reply), from its log", parents=c)
    hi.add_argument("id", metavar="ID", help="the session")
    hi.add_argument("--json", action="store_true", help="print the turns as JSON")
    fk = sub.add_parser("fork", help="a new session with ID's transcript up to the end of"
                        " turn N (README, Going back)", parents=c)
    fk.add_argument("id", metavar="ID", help="the session to go back in")
    fk.add_argument("--at", type=int, required=True, metavar="N",
                    help="the last turn copied (see `session history ID`)")
    fk.add_argument("--message", metavar="TEXT",
                    help="run a new turn on the fork with this message ('-' reads stdin)")
    fk.add_argument("--agent", metavar="REF", help="the fork's agent spec (default: ID's)")
    fk.add_argument("--reason", default="", help="why (recorded with the fork)")
    fk.add_argument("--no-wait", action="store_true",
                    help="with --message: queue it and return (a worker elsewhere runs it)")
    fk.add_argument("--timeout", type=float, default=600.0, metavar="S",
                    help="give up waiting after S seconds (exit 1)")
    fk.add_argument("--json", action="store_true", help="print the new session as JSON")
    rs = sub.add_parser("resume", help="continue a task its turn's max_tool_rounds stopped"
                        " (as /continue)", parents=c)
    rs.add_argument("id", metavar="ID", help="the session")
    st = sub.add_parser("stop", help="stop a session and its active children", parents=c)
    st.add_argument("id", metavar="ID", help="the session")
    st.add_argument("--reason", default="", help="why (recorded)")
    sp = sub.add_parser("spawn", help="start a subagent (child session) of ID", parents=c)
    sp.add_argument("id", metavar="ID", help="the parent session")
    sp.add_argument("task", metavar="TASK", help="what the subagent should do")
    sp.add_argument("--agent", metavar="REF", help="the child's agent spec (default: ID's)")
    sp.add_argument("--label", default="", help="a short label for the child")
    sp.add_argument("--no-wait", action="store_true",
                    help="return at once (a worker elsewhere runs the child)")
    sp.add_argument("--timeout", type=float, default=600.0, metavar="S",
                    help="give up waiting after S seconds (exit 1)")
    r = sub.add_parser("run", help="run the session worker (ctrl+c stops)", parents=c)
    r.add_argument("--until-idle", action="store_true",
                   help="exit once no turn job is queued or running")
    r.add_argument("--concurrency", type=int, default=16, metavar="N",
                   help="turns run at once (default 16)")


def _config(args: argparse.Namespace) -> ClawtowerConfig:
    from clawtower.core.agents.config import load_config

    return load_config(getattr(args, "config", None))


def _text(args: argparse.Namespace) -> str:
    text: str = sys.stdin.read() if args.text == "-" else args.text
    if not text.strip():
        raise ValidationError(f"session {args.id}: TEXT is empty")
    return text


def _operator() -> str:
    from .common import operator_name

    return operator_name()


# --------------------------------------------------------------------------- session


async def cmd_session(args: argparse.Namespace) -> int:
    sc = args.session_cmd
    read_only = sc in ("list", "tree", "show", "history")
    cfg = None if read_only else _config(args)  # a bad config fails before the store opens
    text = _text(args) if sc in ("send", "steer") else ""
    if sc == "fork" and args.message == "-":
        args.message = sys.stdin.read()

    async def run(store: Store) -> int:
        if read_only:  # the read API alone: no payload, spec or gate models (start-up)
            from clawtower.core.sessions.reads import SessionReads

            return await _read(SessionReads(store), sc, args)
        from clawtower.core.sessions.service import Sessions

        sessions = Sessions(store)
        by = _operator()
        if sc == "new":
            sid = await sessions.create(agent=args.agent, title=args.title, model=args.model,
                                        cfg=cfg, channel=args.channel, deliver=args.deliver,
                                        by=by)
            if args.json:
                output.emit_json(await sessions.get(sid))
            else:
                print(sid)
            return 0
        if sc == "fork":
            return await _fork(store, sessions, cfg, args, by)
        if sc == "resume":
            from clawtower.core.sessions.commands import run_command

            print((await run_command(sessions, args.id, "/continue", cfg=cfg, by=by)).text)
            return 0
        if sc == "stop":
            stopped = await sessions.stop(args.id, by=by, reason=args.reason)
            print(f"stopped: {', '.join(stopped)}")
            return 0
        if sc in ("send", "steer"):
            from clawtower.core.sessions.commands import is_command, run_command

            if is_command(text):
                out = await run_command(sessions, args.id, text, cfg=cfg, by=by)
                print(out.text)
                return 0
            sent = await sessions.send(args.id, text, sender=by)
            if sent.get("waiting"):
                sys.stderr.write(f"{args.id}: a tool call waits for approval; the message is"
                                 " taken at the safe boundary after it is decided\n")
            elif sent["status"] == "pending" and sent.get("turn_running"):
                sys.stderr.write(f"{args.id}: busy; the message is taken at the running turn's"
                                 " next safe boundary (or waits in the backlog)\n")
            elif sent["status"] == "pending":
                sys.stderr.write(f"{args.id}: queued (no turn running); the session's job"
                                 " takes it when a session worker runs it\n")
            if args.no_wait or sc == "steer":
                print(sent["msg_id"])
                return 0
            assert cfg is not None
            return await _wait_reply(store, cfg, args.id, sent["msg_id"], args.timeout)
        if sc == "spawn":
            child = await sessions.spawn(args.id, args.task, agent=args.agent,
                                         label=args.label, by=by)
            print(f"{child['session']}: spawned ({child['agent']}, run {child['run_id']},"
                  f" hop {child['hop']})")
            if args.no_wait:
                return 0
            assert cfg is not None
            code = await _wait_reply(store, cfg, child["session"], None, args.timeout)
            await _say_who_takes_the_announce(store, args.id, child["session"])
            return code
        if sc == "run":
            assert cfg is not None
            return await _worker(store, cfg, args)
        raise ValidationError(f"session: unknown action {sc!r}")

    async with cli_store(args.db, read_only=read_only) as store:
        return await run(store)


async def _read(sessions: SessionReads, sc: str, args: argparse.Namespace) -> int:
    """`session list|tree|show`."""
    if sc == "list":
        rows = await sessions.list()
        if args.json:
            output.emit_json(rows)
        elif not rows:
            nothing_yet("sessions", "`clawtower session new --agent NAME` starts one")
        else:
            print(output.table([_row(r) for r in rows], HEAD))
        return 0
    if sc == "tree":
        forest = await sessions.tree(args.id)
        if args.json:
            output.emit_json(forest)
        else:
            print("\n".join(_tree_lines(forest)) or "no sessions yet")
        return 0
    if sc == "history":
        h = await sessions.history(args.id)
        if args.json:
            output.emit_json(h)
        else:
            print(_history(h))
        return 0
    if sc == "show":
        s = await sessions.get(args.id)
        if args.json:
            output.emit_json(s)
        else:
            print(_detail(s))
        return 0
    raise ValidationError(f"session: unknown action {sc!r}")


async def _fork(store: Store, sessions: Any, cfg: ClawtowerConfig | None,
                args: argparse.Namespace, by: str) -> int:
    """`session fork ID --at N [--message TEXT]`: the fork, then (with a message) its turn,
    run here as `session send` runs one."""
    out = await sessions.fork(args.id, args.at, message=args.message, agent=args.agent,
                              reason=args.reason, by=by)
    new = out["session"]
    sys.stderr.write(f"{new}: forked from {args.id} at turn {args.at}\n")
    code = 0
    if out["sent"] is not None and not args.no_wait:
        assert cfg is not None
        code = await _wait_reply(store, cfg, new, out["sent"]["msg_id"], args.timeout)
    if args.json:
        output.emit_json(await sessions.get(new))
    else:
        print(new)
    return code


def _history(h: dict[str, Any]) -> str:
    import datetime as dt

    o = h["origin"]
    lines = [f"{h['session']}: {len(h['turns'])} turn(s)" + (
        f" · forked from {o['session']} at turn {o['turn']} by {o['by']}"
        + (f" ({o['reason']})" if o["reason"] else "") if o else "")]
    for t in h["turns"]:
        when = dt.datetime.fromtimestamp(t["at"]).strftime("%Y-%m-%d %H:%M:%S")
        tools = ", ".join(c["name"] for c in t["tool_calls"]) or "-"
        mark = f" [copied from {t['copied_from']}]" if t["copied_from"] else ""
        wait = f" (approval {t['approval']})" if t["approval"] else ""
        msg = " ".join(t["message"].split())
        lines.append(f"  {t['n']:>3}  {when}  {t['status']}{wait}{mark}  {t['tokens']} tok"
                     f"  tools: {tools}")
        lines.append(f"       > {msg[:100] + ('…' if len(msg) > 100 else '')}")
        if t["reply"]:
            lines.append(f"       < {t['reply']}")
    return "\n".join(lines)


async def _say_who_takes_the_announce(store: Store, parent: str, child: str) -> None:
    """A child's announce queues a turn of its parent; say what runs it if nothing does."""
    from .common import live_lease

    row = await store.fetchone("SELECT status FROM sessions WHERE id=?", (parent,))
    if row and row["status"] == "queued" and not await live_lease(store, "worker:"):
        sys.stderr.write(f"{parent}: queued to take {child}'s announce; no session worker runs"
                         " now: `clawtower session run --until-idle`, `clawtower serve` or the"
                         " console runs the turn\n")


async def run_here(store: Store, cfg: ClawtowerConfig, sid: str, timeout_s: float,
                   on_text: Callable[[str, str, str], None] | None = None) -> bool:
    """Run session `sid`'s turns (and its children's) on the engine `serve` runs, with its
    session worker for this session only, until it is quiet; False on timeout. A worker in
    another process holding a turn is simply waited for."""
    from clawtower.core.workers import build_engine

    composed = build_engine(store, None, workers=["sessions"], config=cfg, on_text=on_text,
                            session_kw={"sessions": {sid}})
    return await drive_engine(composed, True, timeout_s=timeout_s, signals=False)


async def waiting_note(store: Store, sid: str) -> str:
    """One line per tool call of `sid` that waits for an operator ('' when none)."""
    from clawtower.core.approvals import decode_approval

    rows = await store.fetchall("SELECT * FROM approvals WHERE kind='tool_call' AND"
                                " subject=? AND status='pending' ORDER BY seq", (sid,))
    return "\n".join(
        f"{sid} waits for approval {a['id']}: {a['context'].get('agent')} wants to call"
        f" {a['context'].get('tool')} (clawtower approve {a['id']} | clawtower reject"
        f" {a['id']} --reason ...)" for a in map(decode_approval, rows))


async def _wait_reply(store: Store, cfg: ClawtowerConfig, sid: str,
                      msg_id: str | None, timeout: float) -> int:
    """Run the session (and its children) in this process until it is quiet, streaming its
    text; a worker in another process holding it is simply waited for."""
    from clawtower.core.sessions.service import Sessions

    streamed: list[str] = []
    turns: list[str] = []

    def on_text(session: str, turn: str, text: str) -> None:
        if session == sid:
            if turns and turns[-1] != turn and not streamed[-1].endswith("\n"):
                sys.stdout.write("\n")
            turns.append(turn)
            streamed.append(text)
            sys.stdout.write(text)
            sys.stdout.flush()

    before = await store.fetchone("SELECT coalesce(max(seq), 0) AS s FROM session_messages"
                                  " WHERE session_id=?", (sid,))
    ok = await run_here(store, cfg, sid, timeout, on_text)
    if streamed and not streamed[-1].endswith("\n"):
        sys.stdout.write("\n")
    s = await Sessions(store).get(sid)
    after = int(before["s"]) if before else 0
    replies = [m for m in s["messages"] if m["seq"] > after and m["role"] == "assistant"]
    if not streamed:  # run elsewhere (or no text streamed): print what was answered
        for m in replies:
            print(m["text"])
    failed = [j for j in s["jobs"] if j["status"] == "failed"]
    cost = f" · ${s['cost_usd']:.6f}" if s["cost_usd"] else ""
    sys.stderr.write(f"{sid} · {s['agent']} · {s['status']} · {s['turns']} turn(s) ·"
                     f" {s['tokens']} tokens{cost} · {len(s['children'])} subagent(s)\n")
    note = await waiting_note(store, sid)
    if note:
        sys.stderr.write(note + "\n")
    if not ok:
        raise ClawError(f"session {sid!r}: still busy after {timeout:g} s (--timeout)")
    if failed and failed[-1]["ended_at"] and not replies:
        raise ClawError(f"session {sid!r}: the turn failed: {failed[-1]['error']}")
    return 0


async def _worker(store: Store, cfg: ClawtowerConfig, args: argparse.Namespace) -> int:

    if args.concurrency < 1:
        raise ValidationError("session run: --concurrency: must be at least 1")

    from clawtower.core.workers import SessionsWorker, build_engine

    # the engine `serve` runs, with its session worker only
    composed = build_engine(store, None, workers=["sessions"], config=cfg,
                            session_kw={"max_concurrent": args.concurrency})
    worker = composed.get("sessions")
    assert isinstance(worker, SessionsWorker)
    runner = worker.runner
    print(f"clawtower: session worker {runner.owner} on {store.path}; ctrl+c stops",
          flush=True)
    ok = await drive_engine(composed, args.until_idle)
    print(f"{runner.finished} turn job(s) run", flush=True)
    return 0 if ok else 1


HEAD = ["ID", "PARENT", "STATUS", "AGENT", "TURNS", "TOKENS", "COST", "TITLE"]


def _row(r: dict[str, Any]) -> list[str]:
    return [r["id"], r["parent_id"] or "-", r["status"], r["agent"], str(r["turns"]),
            str(r["tokens"]), f"${r['cost_usd']:.4f}", r["title"] or "-"]


def _tree_lines(nodes: list[dict[str, Any]], depth: int = 0) -> list[str]:
    out = []
    for n in nodes:
        result = f" ({n['result']})" if n["result"] else ""
        out.append(f"{'  ' * depth}{'└ ' if depth else ''}{n['id']} [{n['status']}{result}]"
                   f" {n['agent']} · {n['tokens']} tok · ${n['cost_usd']:.4f}"
                   + (f" · {n['title']}" if n["title"] else ""))
        out.extend(_tree_lines(n["children"], depth + 1))
    return out


def _detail(s: dict[str, Any]) -> str:
    model = s.get("runs_on") or (f"{s['provider_override']}/{s['model_override']}"
                                 if s["model_override"] else "spec default")
    lines = [f"{s['id']}: {s['title'] or '(untitled)'}",
             f"  status: {s['status']}" + (f" ({s['result']})" if s["result"] else ""),
             f"  agent: {s['agent']} ({s['agent_id']}) · runs on: {model}",
             f"  channel: {s['channel']} · deliver: {str(s['deliver']).lower()} · hop"
             f" {s['hop']}" + (f" · parent {s['parent_id']}" if s["parent_id"] else ""),
             f"  usage: {s['turns']} turn(s), {s['tokens']} tokens, ${s['cost_usd']:.6f}"]
    o = s.get("origin")
    if o:
        lines.append(f"  forked from {o['session']} at turn {o['turn']} by {o['by']}"
                     + (f": {o['reason']}" if o["reason"] else ""))
    lines.append("transcript:")
    from clawtower.core.sessions.reads import announce_said

    for m in s["messages"]:
        mark = " [steer]" if m["meta"].get("steered") else ""
        said = announce_said(m["meta"]) if m["role"] == "announce" else None
        lines.append(f"  {m['role']}{mark}: {said or m['text']}")
    waiting = [b for b in s["backlog"] if b["status"] == "waiting"]
    if waiting:
        lines.append("backlog:")
        lines.extend(f"  {b['kind']}: {b['text']}" for b in waiting)
    if s["pending"]:
        lines.append("pending:")
        lines.extend(f"  {p['status']}: {p['text']}" for p in s["pending"])
    if s["announces"]:
        lines.append("announces:")
        lines.extend(f"  {a['child']} @{a['agent']} {a['status']}: {a['summary']}"
                     f" ({a['tokens']} tok)" for a in s["announces"])
    recalled = [j for j in s["jobs"] if j.get("recalled")]
    if recalled:
        lines.append("recalled (per turn):")
        lines.extend(f"  {j['turn_id']}: " + ", ".join(
            f"{r['namespace']} {r['key']} ({r['score']:.3f})" for r in j["recalled"])
                     for j in recalled)
    if s["children"]:
        lines.append("children: " + ", ".join(f"{c['id']} [{c['status']}]"
                                              for c in s["children"]))
    return "\n".join(lines)


# --------------------------------------------------------------------------- agents spec


__all__ = ["cmd_session", "register"]
