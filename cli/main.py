"""`clawtower`: the command line. Every command goes through the same core API as the console.

Exit codes: 0 ok, 1 runtime error, 2 usage or validation error (one line naming the file,
field or id at fault).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

# Only what building the parser and reporting errors needs is imported here; each handler
# imports the core modules of its own command (start-up: BENCHMARKS.md).
from core.config import config_path, default_db, effects_journal, home
from core.errors import ClawError, ValidationError
from core.tasks.permissions import Role, parse_role
from core.tasks.phases import Phase, parse_phase

from . import agents as agents_cli
from . import output
from . import session as session_cli
from . import tools as tools_cli
from . import workflow as workflow_cli
from .stores import cli_store, wait_for_store

if TYPE_CHECKING:
    import asyncio

    from core.agents.registry import AgentSet
    from core.meetings.coordinator import MeetingConfig
    from core.store import SQLiteStore

# Command groups that live in modules of their own: each has register(cmd) and HANDLERS.
EXTENSIONS = (workflow_cli, agents_cli, tools_cli, session_cli)


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def operator_name() -> str:
    try:
        return os.environ.get("CLAWTOWER_OPERATOR") or getpass.getuser() or "operator"
    except Exception:
        return "operator"


def default_agents() -> str | None:
    """The console's simulator script: $CLAWTOWER_HOME/agents.yaml, if there is one."""
    p = home() / "agents.yaml"
    return str(p) if p.exists() else None


def default_agents_file() -> str | None:
    """For the engine and meetings: the project config (clawtower.yaml, which may name real
    providers) if there is one, else the simulator script agents.yaml, else None."""
    path, asked = config_path()
    if asked or path.exists():
        return str(path)
    return default_agents()


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--db", default=argparse.SUPPRESS, metavar="PATH",
                        help="store file (default: $CLAWTOWER_HOME/clawtower.db)")
    p = _Parser(prog="clawtower", parents=[common],
                description="Multi-agent orchestration engine with an operator console.")
    p.add_argument("--agents", metavar="FILE", help="simulated agents script (YAML)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def cmd(name: str, help_: str, **kw: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, parents=[common], **kw)

    d = cmd("demo", "seed a live demo with simulated agents and open the console")
    d.add_argument("--headless", action="store_true",
                   help="run without a screen until a human is needed, print a summary")
    d.add_argument("--speed", type=float, default=1.0,
                   help="multiply simulated think times (0 = instant)")

    s = cmd("serve", "run the engine without a console")
    s.add_argument("--agents", metavar="FILE", help="simulated agents script (YAML)")
    s.add_argument("--until-idle", action="store_true",
                   help="exit once nothing more can happen without a human")

    e = cmd("events", "print the event log")
    e.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    e.add_argument("--json", action="store_true", help="one JSON object per line")
    e.add_argument("--after", type=int, default=0, metavar="SEQ", help="start after SEQ")
    e.add_argument("--entity", metavar="ID", help="only events of this entity id")

    t = cmd("task", "create, list, show, move and review tasks")
    tsub = t.add_subparsers(dest="task_cmd", metavar="ACTION", parser_class=_Parser,
                            required=True)
    tc = tsub.add_parser("create", help="create a task from a spec file", parents=[common])
    tc.add_argument("spec", metavar="SPEC.yaml")
    tc.add_argument("--json", action="store_true")
    tu = tsub.add_parser("update-spec", help="replace a draft task's spec", parents=[common])
    tu.add_argument("id")
    tu.add_argument("spec", metavar="SPEC.yaml")
    tl = tsub.add_parser("list", help="list tasks", parents=[common])
    tl.add_argument("--phase", metavar="P")
    tl.add_argument("--json", action="store_true")
    tsh = tsub.add_parser("show", help="a task's history, reviews, attempts, artifacts",
                          parents=[common])
    tsh.add_argument("id")
    tsh.add_argument("--json", action="store_true")
    tt = tsub.add_parser("transition", help="move a task's phase (orchestrator only)",
                         parents=[common])
    tt.add_argument("id")
    tt.add_argument("phase")
    tt.add_argument("--as", dest="role", required=True, metavar="ROLE")
    tt.add_argument("--reason", required=True)
    tt.add_argument("--by", default=None, metavar="NAME")
    tr = tsub.add_parser("review", help="append a spec or quality review", parents=[common])
    tr.add_argument("id")
    tr.add_argument("--as", dest="role", required=True, metavar="ROLE",
                    help="spec_reviewer or quality_reviewer")
    tr.add_argument("--verdict", required=True,
                    help="spec: approved|changes_requested|blocked; quality: approve|rework")
    tr.add_argument("--finding", action="append", default=[], metavar="TEXT",
                    help="a finding; 'path:line: text' references a file (repeatable)")
    tr.add_argument("--risk", choices=["low", "medium", "high"], help="quality reviews")
    tr.add_argument("--maintainability", default="", help="quality reviews")
    tr.add_argument("--test-gap", action="append", default=[], help="quality reviews")
    tr.add_argument("--by", default=None, metavar="NAME")

    a = cmd("approvals", "pending approvals, every kind, one list")
    a.add_argument("--json", action="store_true")
    a.add_argument("--all", action="store_true", help="include decided ones")
    ap = cmd("approve", "approve a pending item")
    ap.add_argument("id")
    ap.add_argument("--by", default=None, metavar="NAME")
    ap.add_argument("--reason", default="")
    rj = cmd("reject", "reject a pending item")
    rj.add_argument("id")
    rj.add_argument("--reason", default="")
    rj.add_argument("--by", default=None, metavar="NAME")

    m = cmd("meeting", "consensus meetings: run, list, show, stop, grant rounds")
    msub = m.add_subparsers(dest="meeting_cmd", metavar="ACTION", parser_class=_Parser,
                            required=True)
    mr = msub.add_parser("run", help="run a meeting to its end, print the result",
                         parents=[common])
    mr.add_argument("--topic", required=True, metavar="TEXT")
    mr.add_argument("--agents", dest="participants", required=True, metavar="A,B,C",
                    help="the participants, comma-separated (at least two)")
    mr.add_argument("--max-rounds", type=int, default=5, metavar="N")
    mr.add_argument("--summary-tokens", type=int, default=500, metavar="N")
    mr.add_argument("--minutes-dir", default=None, metavar="DIR",
                    help="where the Markdown minutes go (default: $CLAWTOWER_HOME/minutes)")
    mr.add_argument("--agents-file", default=None, metavar="FILE",
                    help="agents file: a simulator script, optionally with real `providers:`"
                         " (default: $CLAWTOWER_HOME/agents.yaml, else the built-in cast)")
    mr.add_argument("--json", action="store_true", help="print the meeting as JSON at the end")
    ml = msub.add_parser("list", help="meetings, newest first", parents=[common])
    ml.add_argument("--json", action="store_true")
    ms = msub.add_parser("show", help="a meeting's rounds, stances and summary",
                         parents=[common])
    ms.add_argument("id")
    ms.add_argument("--json", action="store_true")
    mst = msub.add_parser("stop", help="stop a running meeting after its current round",
                          parents=[common])
    mst.add_argument("id")
    mst.add_argument("--reason", default="")
    mst.add_argument("--by", default=None, metavar="NAME")
    mg = msub.add_parser("grant", help="grant a running meeting N more rounds",
                         parents=[common])
    mg.add_argument("id")
    mg.add_argument("n", type=int, metavar="N")
    mg.add_argument("--by", default=None, metavar="NAME")

    st = cmd("store", "check or rebuild the store's projections")
    ssub = st.add_subparsers(dest="store_cmd", metavar="ACTION", parser_class=_Parser,
                             required=True)
    ssub.add_parser("verify", help="replay the log and compare with live projections",
                    parents=[common])
    ssub.add_parser("rebuild", help="rebuild projections from the log", parents=[common])
    ssub.add_parser("info", help="schema version, events, size", parents=[common])
    for ext in EXTENSIONS:
        ext.register(cmd)
    return p


# --------------------------------------------------------------------------- commands


async def _with_store(args: argparse.Namespace,
                      fn: Callable[[SQLiteStore], Awaitable[int]],
                      read_only: bool = False) -> int:
    """Run `fn` on the store of --db. A `read_only` command never creates it (cli/stores.py)."""
    async with cli_store(args.db, read_only=read_only) as store:
        return await fn(store)


async def cmd_task(args: argparse.Namespace) -> int:
    # Every input is checked before the store is opened: a bad spec file, phase or role
    # must not leave a store behind (nor the WAL files of a fresh one).
    from core.tasks.commands import parse_finding
    from core.tasks.service import Tasks
    from core.tasks.spec import load_spec

    tc = args.task_cmd
    spec = load_spec(args.spec) if tc in ("create", "update-spec") else None
    phase: Phase | None = None
    if tc == "list" and args.phase:
        phase = parse_phase(args.phase, "--phase")
    elif tc == "transition":
        phase = parse_phase(args.phase, "PHASE")
    role = parse_role(args.role) if tc in ("transition", "review") else None
    findings = [parse_finding(f) for f in args.finding] if tc == "review" else []

    async def run(store: SQLiteStore) -> int:
        tasks = Tasks(store)
        if tc == "create":
            assert spec is not None
            tid = await tasks.create(spec, actor=operator_name(), source=str(args.spec))
            if args.json:
                output.emit_json(await tasks.get(tid))
            else:
                print(tid)
            return 0
        if tc == "update-spec":
            assert spec is not None
            problems = await tasks.update_spec(args.id, spec, actor=operator_name())
            print(f"{args.id}: spec updated" + (f"; not ready: {'; '.join(problems)}"
                                                if problems else "; ready for review"))
            return 0
        if tc == "list":
            rows = await tasks.list(phase)
            if args.json:
                output.emit_json(rows)
            else:
                print(output.table([[r["id"], r["phase"], str(r["attempts"]), r["title"]]
                                    for r in rows], ["ID", "PHASE", "ATT", "TITLE"]))
            return 0
        if tc == "show":
            t = await tasks.get(args.id)
            if args.json:
                output.emit_json(t)
            else:
                print(output.task_detail(t))
            return 0
        if tc == "transition":
            assert phase is not None and role is not None
            r = await tasks.transition(args.id, phase, args.reason, role=role,
                                       actor=args.by or operator_name())
            print(f"{r['task']}: {r['from']} -> {r['to']}")
            return 0
        if tc == "review":
            assert role is not None
            details = None
            if role == Role.QUALITY_REVIEWER:
                details = {"risk": args.risk or "low", "maintainability": args.maintainability,
                           "test_gaps": args.test_gap}
            seq = await tasks.review(args.id, role=role, reviewer=args.by or operator_name(),
                                     verdict=args.verdict,
                                     findings=findings,
                                     details=details)
            print(f"{args.id}: review recorded (event {seq})")
            return 0
        raise ValidationError(f"task: unknown action {tc!r}")

    return await _with_store(args, run, read_only=tc in ("list", "show"))


async def cmd_approvals(args: argparse.Namespace) -> int:
    from core.approvals import Approvals

    async def run(store: SQLiteStore) -> int:
        ap = Approvals(store)
        rows = await (ap.all() if args.all else ap.pending())
        if args.json:
            output.emit_json(rows)
            return 0
        if not rows:
            print("no pending approvals")
            return 0
        print(output.table(
            [[r["id"], r["kind"], r["status"], r["subject"], r["requested_by"],
              output.ts(r["requested_at"]), r["title"]] for r in rows],
            ["ID", "KIND", "STATUS", "SUBJECT", "ASKED BY", "WHEN", "WHAT"]))
        return 0

    return await _with_store(args, run, read_only=True)


async def cmd_decide(args: argparse.Namespace, approve: bool) -> int:
    from core.approvals import Approvals

    async def run(store: SQLiteStore) -> int:
        ap = Approvals(store)
        by = args.by or operator_name()
        if approve:
            r = await ap.approve(args.id, by=by, reason=args.reason)
        else:
            r = await ap.reject(args.id, by=by, reason=args.reason)
        print(f"{r['approval']}: {r['decision']} by {by} ({r['kind']} {r['subject']})")
        if r.get("run_status"):  # a workflow gate: the run went on in this process
            env = r.get("envelope") or {}
            waiting = {"needs_approval": "waits at another approval",
                       "needs_input": "waits for an answer"}.get(str(env.get("status")))
            print(f"{r['subject']}: {waiting or r['run_status']}"
                  + (f" ({env['error']['message']})" if env.get("error") else ""))
        return 0

    return await _with_store(args, run)


def _meeting_config(args: argparse.Namespace) -> MeetingConfig:
    from pydantic import ValidationError as PydanticValidationError

    from core.meetings.coordinator import MeetingConfig

    names = [n.strip() for n in args.participants.split(",") if n.strip()]
    try:
        return MeetingConfig(topic=args.topic, participants=names, max_rounds=args.max_rounds,
                             summary_tokens=args.summary_tokens)
    except PydanticValidationError as exc:
        err = exc.errors()[0]
        field = "--" + str(err["loc"][0]).replace("_", "-")
        raise ValidationError(f"meeting: {field}: {err['msg']}") from None


async def cmd_meeting(args: argparse.Namespace) -> int:
    from core.meetings.service import Meetings, start_meeting

    mc = args.meeting_cmd
    if mc == "run":
        # everything is checked before the store is opened: bad input writes nothing
        config = _meeting_config(args)
        script_path = (args.agents_file or getattr(args, "agents", None)
                       or default_agents_file())
        agents = _agents(script_path)
        from core.meetings.coordinator import validate as validate_meeting

        validate_meeting(config, agents)
        minutes_dir = Path(args.minutes_dir) if args.minutes_dir else home() / "minutes"
    if mc == "grant" and args.n < 1:
        raise ValidationError(f"meeting {args.id}: grant at least 1 round, got {args.n}")

    async def run(store: SQLiteStore) -> int:
        meetings = Meetings(store)
        by = getattr(args, "by", None) or operator_name()
        if mc == "run":
            import asyncio

            mid, task = await start_meeting(store, agents, config, minutes_dir=minutes_dir)
            print(f"{mid}: {config.topic.strip()} ({', '.join(config.participants)})",
                  flush=True)
            follower = asyncio.create_task(_meeting_progress(store, mid))
            try:
                out = await task
            finally:
                await follower
            m = await meetings.get(mid)
            if args.json:
                output.emit_json(m)
                return 0
            print(f"result: {out.result.value} ({out.reason}) after {out.rounds} round(s):"
                  f" {out.detail}")
            print(f"minutes: {m['minutes_path']}")
            return 0
        if mc == "list":
            rows = await meetings.list()
            if args.json:
                output.emit_json(rows)
            elif not rows:
                print("no meetings")
            else:
                print(output.table(
                    [[r["id"], r["status"], r["result"] or "-", r["reason"] or "-",
                      f"{r['rounds']}/{r['max_rounds']}", ",".join(r["participants"]),
                      output.ts(r["started_at"]), r["topic"]] for r in rows],
                    ["ID", "STATUS", "RESULT", "WHY", "ROUNDS", "AGENTS", "STARTED", "TOPIC"]))
            return 0
        if mc == "show":
            m = await meetings.get(args.id)
            if args.json:
                output.emit_json(m)
            else:
                print(_meeting_detail(m))
            return 0
        if mc == "stop":
            await meetings.request_stop(args.id, by=by, reason=args.reason)
            print(f"{args.id}: stop requested; it ends after the current round")
            return 0
        if mc == "grant":
            total = await meetings.grant_rounds(args.id, args.n, by=by)
            print(f"{args.id}: {args.n} more round(s); now at most {total}")
            return 0
        raise ValidationError(f"meeting: unknown action {mc!r}")

    return await _with_store(args, run, read_only=mc in ("list", "show"))


async def _meeting_progress(store: SQLiteStore, mid: str) -> None:
    """One line per finished round, until the meeting ends."""
    seq = 0
    while True:
        for e in await store.events_after(seq, 1000, entity_id=mid):
            seq = e.seq
            if e.type == "meeting.round_ended":
                p = e.payload.model_dump()
                stances = await store.fetchall(
                    "SELECT agent, stance FROM meeting_replies WHERE meeting_id=? AND round=?"
                    " ORDER BY agent", (mid, p["round"]))
                print(f"round {p['round']}: {p['consensus']} ("
                      + ", ".join(f"{r['agent']} {r['stance']}" for r in stances) + ")",
                      flush=True)
            if e.type == "meeting.ended":
                return
        await store.wait_for_change(seq, 0.2)


def _meeting_detail(m: dict[str, Any]) -> str:
    lines = [
        f"{m['id']}: {m['topic']}",
        f"  status: {m['status']}" + (f", {m['result']} ({m['reason']})" if m["result"] else ""),
        f"  participants: {', '.join(m['participants'])} (summarizer {m['summarizer']})",
        f"  rounds: {len(m['rounds'])} of at most {m['max_rounds']}",
    ]
    if m["detail"]:
        lines.append(f"  why: {m['detail']}")
    if m["minutes_path"]:
        lines.append(f"  minutes: {m['minutes_path']}")
    for r in m["rounds"]:
        lines.append(f"round {r['round']}: {r['consensus'] or 'running'}"
                     f" ({r['prompt_tokens']} prompt tokens)")
        for x in r["replies"]:
            status = "" if x["status"] == "replied" else f" [{x['status']}]"
            lines.append(f"  {x['agent']}: {x['stance']}{status}: {x['why']}")
    if m["summary"]:
        lines.append(f"summary: {m['summary']}")
    return "\n".join(lines)


async def cmd_events(args: argparse.Namespace) -> int:
    async def run(store: SQLiteStore) -> int:
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
                return 0
            await store.wait_for_change(seq, 1.0)

    if args.follow:  # follow a store another process is about to create
        await wait_for_store(args.db)
    return await _with_store(args, run, read_only=True)


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
    return await _with_store(args, run, read_only=True)


async def _engine_until_stopped(store: SQLiteStore, agents: AgentSet, db: str,
                                until_idle: bool, quiet: bool = False) -> int:
    import asyncio

    from core.effects import JournalSink
    from core.engine import Engine

    engine = Engine(store, agents, effects=JournalSink(effects_journal(db)))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, engine.stop)
    done = asyncio.Event()
    follower = asyncio.create_task(_print_progress(store, await store.last_seq(), quiet, done))
    runner = asyncio.create_task(engine.run())
    try:
        if until_idle:
            while not engine.holding and not runner.done():
                await asyncio.sleep(0.05)
            idle = await engine.orchestrator.run_until_idle(timeout_s=3600)
            engine.stop()
            if not idle:
                return 1
        await runner
    finally:
        engine.stop()
        await runner
        done.set()
        await follower
    for err in engine.orchestrator.errors:
        sys.stderr.write(f"clawtower: warning: {err}\n")
    return 0


async def _print_progress(store: SQLiteStore, seq: int, quiet: bool,
                          done: asyncio.Event) -> None:
    """Progress for long work: one line per phase change and approval request."""
    while True:
        finished = done.is_set()  # one last drain after the engine stopped
        for e in await store.events_after(seq, 1000):
            seq = e.seq
            if not quiet and e.type in ("task.transitioned", "approval.requested",
                                        "approval.decided", "lease.acquired"):
                print(output.event_line(e), flush=True)
        if finished:
            return
        await store.wait_for_change(seq, 0.2)


async def cmd_serve(args: argparse.Namespace) -> int:
    path = args.agents or default_agents_file()
    # a bad agents file or config fails before the store is opened
    agents = _agents(path)

    async def run(store: SQLiteStore) -> int:
        print(f"clawtower: engine on {store.path} (agents: {path or 'built-in simulator'});"
              " ctrl+c stops", flush=True)
        return await _engine_until_stopped(store, agents, args.db, args.until_idle)

    return await _with_store(args, run)


def _agents(path: str | None) -> AgentSet:
    """The agents of `path` (a config or simulator script), else the built-in simulator."""
    if path:
        from core.agents.config import load_agents

        return load_agents(path)
    from core.agents.registry import AgentSet

    return AgentSet.simulated()


def dispatch(args: argparse.Namespace) -> int:
    if args.command is None:
        from tui.app import run_console

        store_check(args.db)
        return run_console(args.db, run_engine=True,
                           agents_script=args.agents or default_agents(),
                           operator=operator_name())
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(args)
    handlers: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
        "task": cmd_task, "approvals": cmd_approvals, "events": cmd_events,
        "store": cmd_store, "serve": cmd_serve, "meeting": cmd_meeting,
        "approve": lambda a: cmd_decide(a, True), "reject": lambda a: cmd_decide(a, False),
    }
    for ext in EXTENSIONS:
        handlers.update(ext.HANDLERS)
    import asyncio  # here, not at the top: `--help` and usage errors never load it

    async def run() -> int:  # asyncio.run wants a coroutine; handlers return awaitables
        try:
            return await handlers[args.command](args)
        finally:
            await _close_http_clients()

    return asyncio.run(run())


async def _close_http_clients() -> None:
    """Model providers keep one HTTP client per loop (keep-alive); close them with the loop.
    Imported only if a provider module was: a command without one pays nothing."""
    common = sys.modules.get("core.agents.httpcommon")
    if common is not None:
        await common.close_clients()


def store_check(db: str) -> None:
    """Open and close the store once, so a bad file fails before the console starts."""

    import asyncio

    from core.store import open_store

    async def check() -> None:
        s = await open_store(db)
        await s.close()

    asyncio.run(check())


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.db_given = hasattr(args, "db")
    if not args.db_given:
        args.db = str(default_db())
    elif not args.db:
        parser.error("argument --db: expected a path, got an empty string")
    try:
        return dispatch(args)
    except ClawError as exc:
        sys.stderr.write(f"clawtower: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("clawtower: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


__all__ = ["Phase", "main"]
