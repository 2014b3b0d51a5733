"""`clawtower session ...` and `clawtower agents spec ...`: sessions, agent specs, steering
and subagents (core/sessions). Same core API as the console.

    session new [--agent A] [--model P/M] [--title T] [--channel C] [--deliver]
    session list|tree [ID] [--json]          session show ID [--json]
    session send ID TEXT [--no-wait]         (a /command is run, not sent)
    session steer ID TEXT                    (queued for the running turn's next boundary)
    session stop ID [--reason R]             session spawn ID TASK [--agent A] [--no-wait]
    session resume ID                        (a task its max_tool_rounds stopped goes on)
    session run [--until-idle]               the worker, without a console
    agents spec list|show REF [--json]       agents spec set NAME [--file F] [--provider ...]
    agents spec import [NAME ...] [--config F]
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core.errors import ClawError, ValidationError

from . import output
from .common import add_config_option, db_parent, nothing_yet, stop_on_signals
from .stores import cli_store

if TYPE_CHECKING:
    from core.agents.config import ClawtowerConfig
    from core.sessions.reads import SessionReads
    from core.sessions.runner import SessionRunner
    from core.sessions.specs import AgentSpecConfig
    from core.store import Store



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


def add_spec_parser(agents_sub: Any) -> None:
    """`agents spec ...` (called by cli/agents.py)."""
    sp = agents_sub.add_parser("spec", help="agent specs of sessions (the store's registry)")
    sub = sp.add_subparsers(dest="spec_cmd", metavar="ACTION", parser_class=type(sp),
                            required=True)
    c = [_common()]
    ls = sub.add_parser("list", help="every agent spec", parents=c)
    ls.add_argument("--json", action="store_true", help="print a JSON list")
    sh = sub.add_parser("show", help="one agent spec", parents=c)
    sh.add_argument("ref", metavar="REF", help="agent id or name")
    sh.add_argument("--json", action="store_true", help="print the spec as JSON")
    st = sub.add_parser("set", help="create or change a spec (fields not given are kept)",
                        parents=c)
    st.add_argument("name", metavar="NAME", help="the spec's name (created if new)")
    st.add_argument("--file", metavar="F.yaml", help="the whole spec config (YAML/JSON)")
    st.add_argument("--provider", help="defaults.provider (simulator, or one of the config)")
    st.add_argument("--model", help="defaults.model")
    st.add_argument("--temperature", type=float, help="defaults.temperature (0-2)")
    st.add_argument("--system", metavar="TEXT", help="system prompt")
    st.add_argument("--tools", metavar="A,B", help="tool allow-list ('*' all, '' none)")
    st.add_argument("--skills", metavar="A,B", help="skill allow-list ('*' all, '' none)")
    st.add_argument("--subagents", metavar="A,B",
                    help="specs it may spawn or delegate to ('*' any, itself included; '' none)")
    im = sub.add_parser("import", help="specs from the agents of clawtower.yaml", parents=c)
    im.add_argument("names", nargs="*", metavar="NAME",
                    help="the agents to import (default: every agent of the config)")


def _config(args: argparse.Namespace) -> ClawtowerConfig:
    from core.agents.config import load_config

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
    read_only = sc in ("list", "tree", "show")
    cfg = None if read_only else _config(args)  # a bad config fails before the store opens
    text = _text(args) if sc in ("send", "steer") else ""

    async def run(store: Store) -> int:
        if read_only:  # the read API alone: no payload, spec or gate models (start-up)
            from core.sessions.reads import SessionReads

            return await _read(SessionReads(store), sc, args)
        from core.sessions.service import Sessions

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
        if sc == "resume":
            from core.sessions.commands import run_command

            print((await run_command(sessions, args.id, "/continue", cfg=cfg, by=by)).text)
            return 0
        if sc == "stop":
            stopped = await sessions.stop(args.id, by=by, reason=args.reason)
            print(f"stopped: {', '.join(stopped)}")
            return 0
        if sc in ("send", "steer"):
            from core.sessions.commands import is_command, run_command

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
    if sc == "show":
        s = await sessions.get(args.id)
        if args.json:
            output.emit_json(s)
        else:
            print(_detail(s))
        return 0
    raise ValidationError(f"session: unknown action {sc!r}")


async def _say_who_takes_the_announce(store: Store, parent: str, child: str) -> None:
    """A child's announce queues a turn of its parent; say what runs it if nothing does."""
    from .common import live_lease

    row = await store.fetchone("SELECT status FROM sessions WHERE id=?", (parent,))
    if row and row["status"] == "queued" and not await live_lease(store, "worker:"):
        sys.stderr.write(f"{parent}: queued to take {child}'s announce; no session worker runs"
                         " now: `clawtower session run --until-idle`, `clawtower serve` or the"
                         " console runs the turn\n")


def _runner(store: Store, cfg: ClawtowerConfig, *, only: set[str] | None = None,
            on_text: Callable[[str, str, str], None] | None = None,
            concurrency: int = 16) -> SessionRunner:
    from core.sessions.runner import SessionRunner

    return SessionRunner(store, cfg, sessions=only, on_text=on_text,
                         max_concurrent=concurrency)


async def waiting_note(store: Store, sid: str) -> str:
    """One line per tool call of `sid` that waits for an operator ('' when none)."""
    from core.approvals import decode_approval

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
    from core.sessions.service import Sessions

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
    runner = _runner(store, cfg, only={sid}, on_text=on_text)
    try:
        ok = await runner.run_until_idle(timeout, {sid})
    finally:
        await runner.aclose()
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
    runner = _runner(store, cfg, concurrency=args.concurrency)
    print(f"clawtower: session worker {runner.owner} on {store.path}; ctrl+c stops",
          flush=True)
    if args.until_idle:
        try:
            ok = await runner.run_until_idle(24 * 3600)
        finally:
            await runner.aclose()
        print(f"{runner.finished} turn job(s) run", flush=True)
        return 0 if ok else 1
    stop_on_signals(runner.stop)
    await runner.run()
    print(f"{runner.finished} turn job(s) run", flush=True)
    return 0


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
    model = (f"{s['provider_override']}/{s['model_override']}" if s["model_override"]
             else "spec default")
    lines = [f"{s['id']}: {s['title'] or '(untitled)'}",
             f"  status: {s['status']}" + (f" ({s['result']})" if s["result"] else ""),
             f"  agent: {s['agent']} ({s['agent_id']}) · model: {model}",
             f"  channel: {s['channel']} · deliver: {str(s['deliver']).lower()} · hop"
             f" {s['hop']}" + (f" · parent {s['parent_id']}" if s["parent_id"] else ""),
             f"  usage: {s['turns']} turn(s), {s['tokens']} tokens, ${s['cost_usd']:.6f}",
             "transcript:"]
    from core.sessions.reads import announce_said

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
    if s["children"]:
        lines.append("children: " + ", ".join(f"{c['id']} [{c['status']}]"
                                              for c in s["children"]))
    return "\n".join(lines)


# --------------------------------------------------------------------------- agents spec


def _names(value: str | None) -> list[str] | bool | None:
    """--tools a,b -> [a, b]; '*' -> None (no filtering); '' -> []; not given -> False."""
    if value is None:
        return False
    if value.strip() == "*":
        return None
    return [x.strip() for x in value.split(",") if x.strip()]


async def cmd_spec(args: argparse.Namespace) -> int:
    from core.safe_yaml import load_file
    from core.sessions.service import Sessions
    from core.sessions.specs import AgentSpecConfig, check_name, parse_config

    sc = args.spec_cmd
    read_only = sc in ("list", "show")
    cfg = _config(args) if sc == "import" else None
    new_config: dict[str, Any] | None = None
    if sc == "set":
        check_name(args.name)
        if args.file:
            new_config = parse_config(load_file(args.file), args.file).model_dump(mode="json")

    async def run(store: Store) -> int:
        sessions = Sessions(store)
        if sc == "list":
            specs = await sessions.specs()
            if args.json:
                output.emit_json([s.as_json() for s in specs])
            elif not specs:
                nothing_yet("agent specs", "`clawtower agents spec import` or `... set NAME`")
            else:
                print(output.table([_spec_row(s.as_json()) for s in specs],
                                   ["ID", "NAME", "MODEL", "TOOLS", "SKILLS", "SOURCE"]))
            return 0
        if sc == "show":
            s = await sessions.spec(args.ref)
            if args.json:
                output.emit_json(s.as_json())
            else:
                import yaml

                print(f"{s.name} ({s.agent_id}) from {s.source}")
                print(yaml.safe_dump(s.config.model_dump(mode="json"), sort_keys=False)
                      .rstrip())
            return 0
        if sc == "import":
            assert cfg is not None
            done = await sessions.import_specs(cfg, args.names or None, by=_operator())
            for name, agent_id in done.items():
                print(f"{name}: {agent_id} (from {cfg.source})")
            return 0
        if sc == "set":
            data = new_config
            if data is None:
                rows = await store.fetchall("SELECT * FROM agent_specs WHERE name=?",
                                            (args.name,))
                base = AgentSpecConfig.model_validate_json(rows[0]["config_json"]) \
                    if rows else AgentSpecConfig()
                data = base.model_dump(mode="json")
            d, p = data["defaults"], data["policy"]
            for fld, val in (("provider", args.provider), ("model", args.model),
                             ("temperature", args.temperature), ("system_prompt", args.system)):
                if val is not None:
                    d[fld] = val
            for fld in ("tools", "skills", "subagents"):
                names = _names(getattr(args, fld))
                if names is None and fld == "subagents":
                    names = ["*"]  # any spec, itself included (unset: any but itself)
                if names is not False:
                    p[fld] = names
            config = parse_config(data, f"agents spec set {args.name}")
            agent_id = await sessions.set_spec(args.name, config, by=_operator())
            print(f"{args.name}: {agent_id}")
            for warning in await _approval_warnings(store, args.name, config):
                sys.stderr.write(f"clawtower: warning: {warning}\n")
            return 0
        raise ValidationError(f"agents spec: unknown action {sc!r}")

    async with cli_store(args.db, read_only=read_only) as store:
        return await run(store)


async def _approval_warnings(store: Store, name: str, config: AgentSpecConfig) -> list[str]:
    """Approval rules that match no tool the spec can see (the built-in tools, the tools the
    store has seen, the allow-list's exact names): most likely a typo."""
    from core.tools.approval import is_glob
    from core.tools.builtin import builtin_tools

    ap = config.policy.approval
    if ap is None or not ap.tools:
        return []
    allow = config.policy.tools
    known = set(builtin_tools()) | {r["name"] for r in await store.fetchall(
        "SELECT name FROM tool_pins")} | {t for t in allow or [] if not is_glob(t)}
    visible = sorted(n for n in known if allow is None or any(
        fnmatch.fnmatchcase(n, p) for p in allow))
    return [f"agent spec {name}: policy.approval.tools.{rule!r} matches no tool it can see"
            f" (known: {', '.join(visible) or 'none'})" for rule in ap.unmatched(visible)
            if rule not in (allow or [])]


def _spec_row(s: dict[str, Any]) -> list[str]:
    d, p = s["config"]["defaults"], s["config"]["policy"]

    def names(v: list[str] | None) -> str:
        return "all" if v is None else ",".join(v) or "none"

    return [s["agent_id"], s["name"], f"{d['provider'] or 'simulator'}/{d['model'] or '-'}",
            names(p["tools"]), names(p["skills"]), s["source"]]


__all__ = ["add_spec_parser", "cmd_session", "cmd_spec", "register"]
