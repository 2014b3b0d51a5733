"""Markdown minutes of a meeting, rendered from the projections (so from the log alone)."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import files
from ..errors import NotFound
from ..store.interface import Store
from ..textsafe import safe, safe_line

_REASONS = {
    "consensus": "consensus reached",
    "max_rounds": "maximum number of rounds reached without consensus",
    "timeout": "meeting timeout",
    "stopped": "stopped by the operator",
    "error": "error",
}


def _ts(value: float | None) -> str:
    if value is None:
        return "-"
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fence(text: str) -> str:
    """A fence longer than any backtick run inside `text`, so a reply cannot close it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


async def load_meeting(store: Store, meeting_id: str) -> dict[str, Any]:
    """The meeting row with its rounds, replies and summaries (one read snapshot)."""
    meeting, rounds, replies, summaries = await store.fetch_many([
        ("SELECT * FROM meetings WHERE id=?", (meeting_id,)),
        ("SELECT * FROM meeting_rounds WHERE meeting_id=? ORDER BY round", (meeting_id,)),
        ("SELECT * FROM meeting_replies WHERE meeting_id=? ORDER BY round, seq", (meeting_id,)),
        ("SELECT * FROM meeting_summaries WHERE meeting_id=? ORDER BY round", (meeting_id,)),
    ])
    if not meeting:
        raise NotFound(f"meeting {meeting_id!r}: no such meeting")
    row = dict(meeting[0])
    row["participants"] = json.loads(row["participants"])
    row["round_rows"] = rounds
    row["replies"] = replies
    row["summaries"] = summaries
    return row


def render_minutes(m: dict[str, Any]) -> str:
    participants: list[str] = m["participants"]
    out = [
        f"# Meeting minutes: {safe_line(m['topic'])}",
        "",
        f"- Meeting: `{m['id']}`",
        f"- Participants: {', '.join(participants)} (summarizer: {m['summarizer']})",
        f"- Started: {_ts(m['started_at'])}",
        f"- Ended: {_ts(m['ended_at'])}",
        f"- Rounds: {m['rounds']} of at most {m['max_rounds']}",
        f"- Result: **{m['result'] or 'running'}**"
        + (f" ({_REASONS.get(m['end_reason'] or '', m['end_reason'])})"
           if m["end_reason"] else ""),
        f"- Why it ended: {m['detail'] or '-'}",
        "",
        "## Stances",
        "",
        "| round | " + " | ".join(participants) + " | consensus | prompt tokens |",
        "|---|" + "---|" * len(participants) + "---|---|",
    ]
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for r in m["replies"]:
        by_round.setdefault(r["round"], {})[r["agent"]] = r
    for rnd in m["round_rows"]:
        got = by_round.get(rnd["round"], {})
        cells = []
        for agent in participants:
            r = got.get(agent)
            if r is None:
                cells.append("-")
            else:
                cells.append(r["stance"] + (f" ({r['status']})" if r["status"] != "replied"
                                            else ""))
        prompt = sum(r["prompt_tokens"] for r in got.values())
        out.append(f"| {rnd['round']} | " + " | ".join(cells)
                   + f" | {rnd['consensus'] or '-'} | {prompt} |")
    summaries = {s["round"]: s for s in m["summaries"]}
    for rnd in m["round_rows"]:
        n = rnd["round"]
        out += ["", f"## Round {n}", "", f"Started {_ts(rnd['started_at'])}; the agents were"
                f" given a summary of {rnd['summary_in_tokens']} tokens.", ""]
        for r in sorted(by_round.get(n, {}).values(), key=lambda r: r["seq"]):
            fence = _fence(r["raw"])
            out += [
                f"### {r['agent']}: {r['stance']}",
                "",
                f"- status: {r['status']}; {r['prompt_tokens']} prompt + "
                f"{r['completion_tokens']} completion tokens; {r['elapsed_s']:g} s",
                f"- why: {_cell(r['why'])}",
                "",
                fence + "text",
                r["raw"] or "(no reply)",
                fence,
                "",
            ]
        if rnd["consensus"]:
            out += [f"Consensus: **{rnd['consensus']}**: {rnd['reason']}", ""]
        s = summaries.get(n)
        if s is not None:
            extra = "; truncated to the cap" if s["truncated"] else ""
            extra += f"; {s['note']}" if s["note"] else ""
            out += [f"Rolling summary ({s['tokens']}/{s['cap']} tokens{extra}):", ""]
            out += ["> " + line if line else ">" for line in s["text"].splitlines() or [""]]
            out.append("")
    # agents' replies, the topic and reasons are untrusted: shown, never obeyed by a viewer
    return safe("\n".join(out).rstrip() + "\n")


async def write_minutes(store: Store, meeting_id: str, directory: str | Path) -> Path:
    """Write `<directory>/<meeting id>.md` atomically; return its path."""
    text = render_minutes(await load_meeting(store, meeting_id))
    target = Path(directory) / f"{meeting_id}.md"

    await asyncio.to_thread(files.write_text, target, text)
    return target
