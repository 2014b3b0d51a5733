"""`clawtower meeting`: consensus meetings: run, list, show, stop, grant rounds."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clawtower.core.config import home
from clawtower.core.errors import ValidationError

from . import output
from .common import (
    add_config_option,
    default_agents_file,
    load_agents,
    nothing_yet,
    operator_name,
    with_store,
)

if TYPE_CHECKING:
    from clawtower.core.meetings.config import MeetingConfig
    from clawtower.core.store import Store


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = subparsers.add_parser(
        "meeting", help="consensus meetings: run, list, show, stop, resume, grant rounds")
    msub = m.add_subparsers(dest="meeting_cmd", metavar="ACTION",
                            required=True)
    mr = msub.add_parser("run", help="run a meeting to its end, print the result")
    mr.add_argument("--topic", required=True, metavar="TEXT", help="the question put to them")
    mr.add_argument("--agents", dest="participants", required=True, metavar="A,B,C",
                    help="the participants, comma-separated (at least two)")
    mr.add_argument("--max-rounds", type=int, default=5, metavar="N",
                    help="give up without consensus after N rounds (default 5)")
    mr.add_argument("--summary-tokens", type=int, default=500, metavar="N",
                    help="the rolling summary's size in tokens (default 500)")
    mr.add_argument("--minutes-dir", default=None, metavar="DIR",
                    help="where the Markdown minutes go (default: $CLAWTOWER_HOME/minutes)")
    add_config_option(mr, "--agents-file")
    mr.add_argument("--json", action="store_true", help="print the meeting as JSON at the end")
    ml = msub.add_parser("list", help="meetings, newest first")
    ml.add_argument("--json", action="store_true", help="print a JSON list")
    ms = msub.add_parser("show", help="a meeting's rounds, stances and summary")
    ms.add_argument("id", metavar="ID", help="the meeting (see `meeting list`)")
    ms.add_argument("--json", action="store_true", help="print the meeting as JSON")
    mst = msub.add_parser("stop", help="stop a running meeting after its current round")
    mst.add_argument("id", metavar="ID", help="the running meeting")
    mst.add_argument("--reason", default="", help="why (recorded with the request)")
    mst.add_argument("--by", default=None, metavar="NAME",
                     help="who asks (default: $CLAWTOWER_OPERATOR, else your login)")
    mres = msub.add_parser(
        "resume", help="continue an orphaned meeting (its process died) here, to its end")
    mres.add_argument("id", metavar="ID", help="the orphaned meeting (see `meeting list`)")
    mres.add_argument("--minutes-dir", default=None, metavar="DIR",
                      help="where the Markdown minutes go (default: $CLAWTOWER_HOME/minutes)")
    add_config_option(mres, "--agents-file")
    mres.add_argument("--json", action="store_true",
                      help="print the meeting as JSON at the end")
    mg = msub.add_parser("grant", help="grant a running meeting N more rounds")
    mg.add_argument("id", metavar="ID", help="the running meeting")
    mg.add_argument("n", type=int, metavar="N", help="how many more rounds (at least 1)")
    mg.add_argument("--by", default=None, metavar="NAME",
                    help="who grants (default: $CLAWTOWER_OPERATOR, else your login)")
    m.set_defaults(handler=cmd_meeting)


def _meeting_config(args: argparse.Namespace) -> MeetingConfig:
    from pydantic import ValidationError as PydanticValidationError

    from clawtower.core.meetings.config import MeetingConfig

    names = [n.strip() for n in args.participants.split(",") if n.strip()]
    try:
        return MeetingConfig(topic=args.topic, participants=names, max_rounds=args.max_rounds,
                             summary_tokens=args.summary_tokens)
    except PydanticValidationError as exc:
        err = exc.errors()[0]
        field = "--" + str(err["loc"][0]).replace("_", "-")
        raise ValidationError(f"meeting: {field}: {err['msg']}") from None


async def cmd_meeting(args: argparse.Namespace) -> int:
    from clawtower.core.meetings.service import Meetings, start_meeting

    mc = args.meeting_cmd
    if mc == "run":
        # everything is checked before the store is opened: bad input writes nothing
        config = _meeting_config(args)
        agents = load_agents(args.config or default_agents_file())
        from clawtower.core.meetings.config import validate as validate_meeting

        validate_meeting(config, agents)
    if mc in ("run", "resume"):
        if mc == "resume":
            agents = load_agents(args.config or default_agents_file())
        minutes_dir = Path(args.minutes_dir) if args.minutes_dir else home() / "minutes"
    if mc == "grant" and args.n < 1:
        raise ValidationError(f"meeting {args.id}: grant at least 1 round, got {args.n}")

    async def run(store: Store) -> int:
        meetings = Meetings(store)
        by = getattr(args, "by", None) or operator_name()
        if mc in ("run", "resume"):
            import asyncio

            if mc == "run":
                mid, task = await start_meeting(store, agents, config,
                                                minutes_dir=minutes_dir)
                print(f"{mid}: {config.topic.strip()} ({', '.join(config.participants)})",
                      flush=True)
            else:
                mid = args.id
                task = asyncio.create_task(meetings.adopt(agents, mid,
                                                          minutes_dir=minutes_dir))
                await asyncio.wait([task], timeout=0.5)  # a refusal prints before progress
                if task.done():
                    task.result()
                print(f"{mid}: adopted; continuing", flush=True)
            follower = asyncio.create_task(_meeting_progress(store, mid))
            try:
                out = await task
            except BaseException:  # e.g. a storage fault: the meeting did not end, so the
                follower.cancel()  # progress would wait for ever; it stays resumable
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await follower
                raise
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
                nothing_yet("meetings",
                            "`clawtower meeting run --topic TEXT --agents A,B` runs one")
            else:
                print(output.table(
                    [[r["id"], "orphaned" if r["orphaned"] else r["status"],
                      r["result"] or "-", r["reason"] or "-",
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
            if await meetings.request_stop(args.id, by=by, reason=args.reason):
                print(f"{args.id}: stopped (its process was gone: nothing left to finish)")
            else:
                print(f"{args.id}: stop requested; it ends after the current round")
            return 0
        if mc == "grant":
            total = await meetings.grant_rounds(args.id, args.n, by=by)
            print(f"{args.id}: {args.n} more round(s); now at most {total}")
            return 0
        raise ValidationError(f"meeting: unknown action {mc!r}")

    return await with_store(args, run, read_only=mc in ("list", "show"))


async def _meeting_progress(store: Store, mid: str) -> None:
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
        f"  status: {m['status']}" + (f", {m['result']} ({m['reason']})" if m["result"] else "")
        + (" (orphaned: its process is gone; `clawtower meeting resume"
           f" {m['id']}` continues it, `meeting stop` ends it)" if m.get("orphaned") else ""),
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
