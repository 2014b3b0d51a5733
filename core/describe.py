"""Human-readable one-liners for events, shared by the console and the CLI."""

from __future__ import annotations

from typing import Any

from .events import StoredEvent


def one_line(text: Any, limit: int = 400) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def event_summary(e: StoredEvent, arrow: str = "→") -> str:
    """One line saying what an event did: the console's event log and `clawtower events`."""
    p: dict[str, Any] = e.payload.model_dump(mode="json")
    t = e.type
    if t == "task.created":
        return f"created: {p.get('title', '')}" + ("" if p.get("spec_ok") else " (spec incomplete)")
    if t == "task.spec_updated":
        return "spec updated"
    if t == "task.transitioned":
        return f"{p['from_phase']} {arrow} {p['to_phase']}: {p.get('reason', '')}"
    if t == "review.appended":
        n = len(p.get("findings") or [])
        more = f", {n} finding(s)" if n else ""
        return f"{p['stage']} {p['verdict']} by {p['reviewer']}{more}"
    if t == "attempt.started":
        esc = " (escalated)" if p.get("escalated") else ""
        return f"attempt {p['attempt']} started on {p['model']}{esc}"
    if t == "attempt.heartbeat":
        return f"attempt {p['attempt']} heartbeat {p.get('note', '')}".rstrip()
    if t == "attempt.checkpoint":
        return f"attempt {p['attempt']} checkpoint {one_line(p.get('data', {}), 80)}"
    if t == "attempt.finished":
        why = f": {p['reason']}" if p.get("reason") else ""
        return f"attempt {p['attempt']} {p['status']}{why}"
    if t == "retry.scheduled":
        return f"retry {p['next_attempt']} scheduled: {p.get('reason', '')}"
    if t == "circuit.opened":
        return f"circuit opened after {p['attempts']} attempt(s): {p.get('failure_summary', '')}"
    if t == "artifact.recorded":
        return f"artifact {p['name']} {p['uri']}"
    if t == "side_effect.planned":
        return f"side effect planned: {p['kind']} {p.get('target', '')}".rstrip()
    if t == "side_effect.intent":
        return f"side effect {p['effect_id']} starting"
    if t == "side_effect.done":
        return f"side effect {p['effect_id']} done {p.get('result', '')}".rstrip()
    if t == "approval.requested":
        return f"approval asked ({p['kind']}) for {p['subject']}: {p.get('title', '')}"
    if t == "approval.decided":
        why = f": {p['reason']}" if p.get("reason") else ""
        return f"{p['decision']} by {e.actor}{why}"
    if t == "permission.refused":
        return f"refused {p['action']} on {p['target']}: {p.get('reason', '')}"
    if t.startswith("lease."):
        return f"{t.split('.', 1)[1]} by {p.get('owner', e.actor)}"
    if t == "agent.usage":
        return (f"{p['agent']} {p['purpose']} on {p['model']}: {p['prompt_tokens']}+"
                f"{p['completion_tokens']} tokens")
    if t == "note.added":
        return str(p.get("text", ""))
    return one_line(p, 200)
