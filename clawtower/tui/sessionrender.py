"""Mode 4's renderables: a session's head, transcript (with the tool calls it waits on and
the drafts it made), streaming reply, announces, backlog and harness activity. Pure functions
of the detail dict (core's `Sessions.get`), so the screen module keeps to the mode's wiring.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from clawtower.core.describe import one_line
from clawtower.core.sessions.reads import announce_said
from clawtower.core.textsafe import safe, safe_line

from .model import fmt_time
from .render import Palette, columns_table

STATUS_TONE = {"running": "active", "queued": "waiting", "idle": "idle", "finished": "done",
               "stopped": "failed", "waiting": "waiting"}

DIFF_LINES = 6  # lines of a diff's new text shown per tool call


def acp_renderable(pal: Palette, runs: list[dict[str, Any]]) -> RenderableType:
    """An ACP harness's turns (core.acp.views): tool calls with their status, the plan,
    diffs (path and the head of the new text), permission requests and who answered."""
    rows: list[RenderableType] = []
    tone = {"completed": "done", "failed": "failed", "in_progress": "active",
            "pending": "waiting"}
    for d in runs:
        r = d["run"]
        head = Text()
        head.append(f"{r['id']} ", style="bold")
        head.append(f"{r['status']}", style=pal.tone(
            {"done": "done", "failed": "failed", "cancelled": "failed"}.get(r["status"],
                                                                           "active")))
        if r["error"]:
            head.append(f"  {safe_line(r['error'][:160])}", style=pal.tone("failed"))
        rows.append(head)
        if r["status"] == "running" and r["text"]:  # its text so far, from any process
            rows.append(Text(safe(f"  …{r['text'][-STREAM_TAIL:]}" if len(r["text"])
                                  > STREAM_TAIL else f"  {r['text']}"), style=pal.tone("active")))
        for e in d["evidence"]:
            if e["kind"] == "plan":
                for entry in e["body"]["entries"]:
                    rows.append(Text(f"  plan [{entry.get('status')}] {entry.get('content')}",
                                     style=pal.tone("idle")))
        for t in d["tool_calls"]:
            line = Text("  ")
            line.append(f"{t['status']:>11} ", style=pal.tone(tone.get(t["status"], "idle"),
                                                              "bold"))
            line.append(safe_line(f"{t['kind'] or 'tool'}: {t['title']}"))
            if t["locations"]:
                line.append(f"  {', '.join(t['locations'])}", style=pal.tone("idle"))
            rows.append(line)
            for c in t["content"]:
                if c.get("type") == "diff":
                    rows.append(Text(f"      diff {c.get('path', '')}", style="bold"))
                    for ln in str(c.get("new_text", "")).splitlines()[:DIFF_LINES]:
                        rows.append(Text(f"      + {ln}", style=pal.tone("done")))
        for p in d["permissions"]:
            line = Text("  ")
            answered = p["status"] != "pending"
            line.append("permission ", style=pal.tone("done" if answered else "waiting",
                                                      "bold"))
            line.append(safe_line(f"{p['tool_kind']}: {p['title']} -> "))
            line.append(f"{p['option_id'] or p['outcome']} by {p['answered_by']}" if answered
                        else f"waiting in mode 2 ({p['approval_id']})")
            rows.append(line)
    return Group(*rows)


def head_renderable(pal: Palette, s: dict[str, Any]) -> RenderableType:
    head = Text()
    head.append(f"{s['id']}  ", style=pal("accent", "bold"))
    head.append(safe_line(str(s.get("title") or (s.get("task") or {}).get("prompt")
                              or "(untitled)")), style="bold")
    head.append("   ")
    head.append(f" {str(s['status']).upper()} ",
                style=pal.tone(STATUS_TONE.get(str(s["status"]), "idle"), "bold reverse"))
    model = s.get("runs_on") or (f"{s['provider_override']}/{s['model_override']}"
                                 if s.get("model_override") else "spec default")
    parent = f" · parent {s['parent_id']} (hop {s['hop']})" if s.get("parent_id") else ""
    meta = Text(f"agent {s['agent']} ({s['agent_id']}) · runs on {model} · channel"
                f" {s['channel']}{' (deliver)' if s.get('deliver') else ''}{parent}",
                style=pal.tone("idle"))
    usage = Text(f"{s['turns']} turn(s) · {s['tokens']:,} tokens · ${s['cost_usd']:.6f} ·"
                 f" {len(s.get('children') or [])} subagent(s)", style=pal.tone("idle"))
    o = s.get("origin")
    if not o:
        return Group(head, meta, usage)
    why = f" ({o['reason']})" if o.get("reason") else ""
    fork = Text(safe_line(f"forked from {o['session']} at turn {o['turn']} by {o['by']}{why}"),
                style=pal.tone("waiting"))
    return Group(head, meta, usage, fork)


def recalled_line(pal: Palette, job: dict[str, Any]) -> RenderableType:
    """What a turn's automatic recall put in its context (keys and scores; `m` shows more)."""
    line = Text(f"{job['turn_id']}  ", style=pal.tone("idle"))
    line.append(safe_line(", ".join(f"{r['namespace']} {r['key']} ({r['score']:.3g})"
                                    for r in job.get("recalled") or [])))
    return line


def gate_rows(pal: Palette, waits: list[dict[str, Any]], drafts: list[dict[str, Any]]
              ) -> list[RenderableType]:
    """Tool calls that wait for an operator (`a`/`r` decide them here or in mode 2), and the
    drafts of manual-tier calls (recorded, never run)."""
    rows: list[RenderableType] = []
    for d in drafts[-5:]:
        line = Text(f"{fmt_time(d.get('at'))} ", style=pal.tone("idle"))
        line.append(f"{'draft':>10}  ", style=pal.tone("idle", "bold"))
        line.append(safe_line(f"{d['name']} {one_line(str(d['arguments']), 120)}")
                    + " (manual tier: recorded, never run)")
        rows.append(line)
    for w in waits:
        ctx = w["context"]
        line = Text(f"{fmt_time(w.get('requested_at'))} ", style=pal.tone("idle"))
        line.append(f"{'approval':>10}  ", style=pal.tone("waiting", "bold reverse"))
        line.append(safe_line(f" {ctx.get('tool')} {one_line(str(ctx.get('arguments')), 120)}"),
                    style="bold")
        line.append(f"  waits for you ({w['id']}): a approve · r reject",
                    style=pal.tone("waiting"))
        rows.append(line)
    return rows


def transcript_renderable(pal: Palette, msgs: list[dict[str, Any]],
                          waits: list[dict[str, Any]] | None = None,
                          drafts: list[dict[str, Any]] | None = None) -> RenderableType:
    gates = gate_rows(pal, waits or [], drafts or [])
    if not msgs and not gates:
        return Text("(no messages yet)", style=pal.tone("idle"))
    rows: list[RenderableType] = []
    for m in msgs:
        line = Text()
        role = str(m["role"])
        tag = role + (" (steer)" if m["meta"].get("steered") else "")
        line.append(f"{fmt_time(m.get('at'))} ", style=pal.tone("idle"))
        line.append(f"{tag:>10}  ", style=pal.tone(
            {"user": "waiting", "assistant": "done", "announce": "active"}.get(role, "idle"),
            "bold"))
        said = announce_said(m.get("meta") or {}) if role == "announce" else None
        line.append(safe(one_line(said, 300) if said else str(m["text"])))
        rows.append(line)
    return Group(*rows, *gates)


STREAM_TAIL = 240  # characters of a streaming reply shown (the pane has a fixed height, so
# a frame repaints that pane only, never the layout)


def streaming_renderable(pal: Palette, text: str) -> RenderableType:
    line = Text()
    line.append(f"{'assistant…':>10}  ", style=pal.tone("active", "bold italic"))
    tail = text if len(text) <= STREAM_TAIL else "…" + text[-STREAM_TAIL:]
    line.append(safe(tail) or "…", style="italic")
    return line


def announces_table(pal: Palette, anns: list[dict[str, Any]]) -> RenderableType:
    table = columns_table(pal, ("Child", {"no_wrap": True}), ("Agent", {"no_wrap": True}),
                          ("Status", {"no_wrap": True}), ("Tokens", {"justify": "right"}),
                          ("Summary", {"ratio": 1}))
    for a in anns:
        table.add_row(str(a["child"]), str(a["agent"]),
                      Text(str(a["status"]), style=pal.tone(
                          "done" if a["status"] == "ok" else "failed")),
                      str(a["tokens"]), one_line(str(a["summary"]), 200))
    return table


def backlog_renderable(pal: Palette, waiting: list[dict[str, Any]],
                       pending: list[dict[str, Any]]) -> RenderableType:
    rows: list[RenderableType] = []
    for b in waiting:
        rows.append(Text(f"{b['kind']:>8}  {one_line(str(b['text']), 300)}"))
    for p in pending:
        rows.append(Text(f"{'pending':>8}  {one_line(str(p['text']), 300)}",
                         style=pal.tone("waiting")))
    return Group(*rows)
