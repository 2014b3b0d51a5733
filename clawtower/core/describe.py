"""Human-readable one-liners for events, shared by the console and the CLI."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .textsafe import safe_line

if TYPE_CHECKING:  # `task show` labels verdicts without the event models
    from .events import StoredEvent


def readable(value: Any) -> str:
    """A payload value as a reader reads it, never a Python repr: a mapping as `key: value,
    ...` (a nested value as JSON; keys with no value left out), a string as it is, anything
    else as JSON."""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_plain(v)}" for k, v in value.items()
                         if v is not None and v != "")
    return _plain(value)


def _plain(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:  # a circular structure: not from a payload
        return str(value)


def one_line(text: Any, limit: int = 400) -> str:
    """`text` as one line for a reader (a mapping or list: `readable`): whitespace collapsed,
    controls and bidi characters shown (core/textsafe.py), cut at `limit`."""
    s = safe_line(" ".join(readable(text).split()))
    return s if len(s) <= limit else s[: limit - 1] + "…"


# Review verdicts as a reader says them: spec reviews store "approved", quality reviews store
# "approve" (their recommendation); one word each, whatever the stage.
VERDICT_LABELS = {"approve": "approved", "approved": "approved", "rework": "rework requested",
                  "changes_requested": "changes requested", "blocked": "blocked"}


def verdict_label(verdict: str) -> str:
    return VERDICT_LABELS.get(verdict, verdict.replace("_", " "))


def event_summary(e: StoredEvent, arrow: str = "→") -> str:
    """One line saying what an event did: the console's event log and `clawtower events`
    (untrusted text in it shown, not obeyed)."""
    return safe_line(_summary(e, arrow))


def _summary(e: StoredEvent, arrow: str) -> str:
    p: dict[str, Any] = e.payload.model_dump(mode="json")
    t = e.type
    if t == "task.created":
        return f"created: {p.get('title', '')}" + ("" if p.get("spec_ok") else " (spec incomplete)")
    if t == "task.spec_updated":
        return "spec updated"
    if t == "task.commanded":
        why = f": {p['reason']}" if p.get("reason") else ""
        return f"{p['command']} {arrow} {p['to_phase']}{why}"
    if t == "task.transitioned":
        return f"{p['from_phase']} {arrow} {p['to_phase']}: {p.get('reason', '')}"
    if t == "review.appended":
        n = len(p.get("findings") or [])
        more = f", {n} finding(s)" if n else ""
        return f"{p['stage']} {verdict_label(str(p['verdict']))} by {p['reviewer']}{more}"
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
        return f"side effect {p['effect_id']} done {one_line(p.get('result', ''), 200)}".rstrip()
    if t == "approval.requested":
        return f"approval asked ({p['kind']}) for {p['subject']}: {p.get('title', '')}"
    if t == "approval.decided":
        why = f": {p['reason']}" if p.get("reason") else ""
        return f"{p['decision']} by {e.actor}{why}"
    if t == "permission.refused":
        return f"refused {p['action']} on {p['target']}: {p.get('reason', '')}"
    if t == "session.forked":
        why = f": {p['reason']}" if p.get("reason") else ""
        return f"forked from {p['origin']} at turn {p['at_turn']}{why}"
    if t == "flow.rerun":
        reused = sum(1 for x in p.get("tasks") or [] if x.get("mode") == "reused")
        return f"rerun of {p['node']}: {reused} of {len(p.get('tasks') or [])} task(s) reused"
    if t.startswith("lease."):
        return f"{t.split('.', 1)[1]} by {p.get('owner', e.actor)}"
    if t == "agent.usage":
        return (f"{p['agent']} {p['purpose']} on {p['model']}: {p['prompt_tokens']}+"
                f"{p['completion_tokens']} tokens")
    if t.startswith("meeting."):
        return _meeting_summary(t, p)
    if t.startswith("workflow."):
        return _workflow_summary(t, p)
    if t.startswith("turn."):
        return _turn_summary(t, p)
    if t == "session.created" and p.get("start"):  # its job claimed there (issue 36)
        st = p["start"]
        return (f"created: {one_line(p.get('title', ''), 80)}; job {p['job_id']} started on"
                f" {st['provider']}/{st['model']} by {st['owner']}")
    if t == "turnjob.finished" and p.get("turn"):  # its turn's end, folded in (issue 36)
        return f"job {p['status']}; " + _turn_summary("turn.finished", p["turn"])
    if t.startswith("trigger."):
        return _trigger_summary(t, p)
    if t == "tool.definition_seen":
        was = " (changed)" if p.get("previous_sha256") else ""
        ask = f"; approval {p['approval_id']} requested" if p.get("approval_id") else ""
        return f"tool {e.entity_id} definition {p['sha256'][:12]} seen{was}{ask}"
    if t == "tool.pinned":
        return f"tool {e.entity_id} pinned at {p['sha256'][:12]} ({p.get('how', 'auto')})"
    if t == "note.added":
        return str(p.get("text", ""))
    if t == "memory.stored":
        src = f" (from {p['source_session']})" if p.get("source_session") else ""
        return f"memory {p['namespace']} {p['key']} stored{src}: {one_line(p['content'], 120)}"
    if t == "memory.forgotten":
        return f"memory {p['namespace']} {p['key']} forgotten: {one_line(p['reason'], 120)}"
    if t == "store.repaired":
        at = ", ".join(f"{v['entity_id']} {v['field']} {v['was']} (event {v['seq']})"
                       for v in p["values"][:5])
        more = f" and {len(p['values']) - 5} more" if len(p["values"]) > 5 else ""
        return f"store repaired: {len(p['values'])} value(s) replaced" + (
            f": {at}{more}" if at else "") + ("; projections differed" if p["differences"]
                                              else "")
    if t == "console.auth_failed":
        return f"web console sign-in from {p['address']} refused: {one_line(p['reason'], 200)}"
    if t == "console.signed_in":  # the cookie's hash, shortened: enough to tell sessions apart
        return (f"{p['operator']} signed in to the web console (by {p['via']}; session"
                f" {p['sid_sha256'][:12]})")
    if t == "console.signed_out":
        return (f"{p['operator']}'s web console session {p['sid_sha256'][:12]} ended:"
                f" {one_line(p['reason'], 200)}")
    if t == "memory.embedded":  # never the vector itself (kilobytes of base64)
        return f"memory {p['namespace']} {p['key']} embedded by {p['model']} ({p['dim']} dims)"
    if t == "traces.exported":
        return (f"sent {p['spans']} span(s) of {p['traces']} trace(s) to {p['endpoint']}"
                f" (the log up to {p['seq']})")
    return one_line(p, 200)


def _meeting_summary(t: str, p: dict[str, Any]) -> str:
    if t == "meeting.started":
        return (f"meeting started: {one_line(p['topic'], 120)} with"
                f" {', '.join(p['participants'])} (at most {p['max_rounds']} rounds)")
    if t == "meeting.round_started":
        return f"round {p['round']} started (summary of {p.get('summary_in_tokens', 0)} tokens)"
    if t == "meeting.reply_recorded":
        status = "" if p["status"] == "replied" else f" ({p['status'].replace('_', ' ')})"
        return (f"round {p['round']}: {p['agent']} {p['stance']}{status}:"
                f" {one_line(p.get('why', ''), 120)}")
    if t == "meeting.round_ended":
        return (f"round {p['round']}: {p['consensus']} consensus ({p['agree']} agree,"
                f" {p['disagree']} disagree, {p['neutral']} neutral)")
    if t == "meeting.summary_recorded":
        cut = ", truncated" if p.get("truncated") else ""
        note = f"; {p['note']}" if p.get("note") else ""
        return f"round {p['round']} summary: {p['tokens']}/{p['cap']} tokens{cut}{note}"
    if t == "meeting.ended":
        detail = f": {one_line(p['detail'], 160)}" if p.get("detail") else ""
        return (f"meeting ended after {p['rounds']} round(s): {p['result']}"
                f" ({p['reason']}){detail}")
    if t == "meeting.minutes_written":
        return f"minutes written to {p['path']}"
    if t == "meeting.stop_requested":
        why = f": {p['reason']}" if p.get("reason") else ""
        return f"stop requested by {p['by']}{why}"
    if t == "meeting.rounds_granted":
        return f"{p['n']} more round(s) granted by {p['by']} (now at most {p['max_rounds']})"
    return one_line(p, 200)


def _workflow_summary(t: str, p: dict[str, Any]) -> str:
    if t == "workflow.started":
        args = f" with {one_line(p['args'], 80)}" if p.get("args") else ""
        return (f"workflow started: {p.get('name') or p['file']} ({len(p.get('steps') or [])}"
                f" steps){args}")
    if t == "workflow.rerun":
        return (f"workflow rerun of {p['origin']} from step {p['from_step']}:"
                f" {len(p.get('reused') or [])} step output(s) reused")
    if t == "workflow.step_started":
        again = f" (attempt {p['attempt']})" if p.get("attempt", 1) > 1 else ""
        return f"step {p['step_id']} ({p['kind']}) started{again}"
    if t == "workflow.step_finished":
        r = p.get("result") or {}
        what = r.get("json") if r.get("json") is not None else r.get("stdout", "")
        done = f"step {p['step_id']} done: {one_line(what, 120)}".rstrip(": ")
        nxt = p.get("next")  # the next step's start, folded in (issue 24.2)
        return f"{done}; {_workflow_summary('workflow.step_started', nxt)}" if nxt else done
    if t == "workflow.step_skipped":
        return f"step {p['step_id']} skipped (condition false)"
    if t == "workflow.step_failed":
        then = "retrying" if p.get("retrying") else f"on_error {p.get('policy', 'stop')}"
        return f"step {p['step_id']} failed ({then}): {one_line(p['error'], 160)}"
    if t == "workflow.paused":
        what = "an answer" if p["gate"] == "input" else "approval"
        return f"waiting for {what} at step {p['step_id']} (approval {p['approval_id']})"
    if t == "workflow.resumed":
        by = f" by {p['by']}" if p.get("by") else ""
        why = (p.get("decided") or {}).get("reason")  # the gate's decision, folded in
        return f"step {p['step_id']} {p['decision']}{by}{f': {why}' if why else ''}; resumed"
    if t == "workflow.step_spawned":
        return f"step {p['step_id']} process {p['process']}"
    if t == "workflow.adopted":
        again = f"; step {p['step_id']} runs again" if p.get("rerun") else ""
        return f"run adopted by {p['owner']} at step {p['index'] + 1}{again}"
    if t == "workflow.interrupted":
        return f"waiting for the operator at step {p['step_id']}: {one_line(p['reason'], 160)}"
    if t == "workflow.recovered":
        by = f" by {p['by']}" if p.get("by") else ""
        return f"step {p['step_id']}: {p['decision']}{by}; resumed"
    if t == "workflow.finished":
        return f"workflow finished: {one_line(p.get('output', []), 160)}"
    if t == "workflow.cancelled":
        by = f" by {p['by']}" if p.get("by") else ""
        return f"workflow cancelled{by}: {p.get('reason', '')}".rstrip(": ")
    if t == "workflow.failed":
        return f"workflow failed: {one_line(p['error'], 200)}"
    return one_line(p, 200)


def _turn_summary(t: str, p: dict[str, Any]) -> str:
    if t == "turn.started":
        return f"turn started: {p['agent']} on {p['model']} for {p['subject']}"
    if t == "turn.tool_called":
        tier = f" [{p['tier']}]" if p.get("tier") not in (None, "", "auto") else ""
        return f"round {p['round']}: {p['name']}({one_line(p['arguments'], 100)}){tier}"
    if t == "turn.tool_result":
        err = f" ({p.get('error_kind') or 'error'})" if p.get("is_error") else ""
        return f"round {p['round']}: {p['name']}{err} → {one_line(p['content'], 120)}"
    if t == "turn.steered":
        return f"round {p['round']}: {len(p.get('messages') or [])} message(s) steered in"
    if t == "turn.finished":
        u = p.get("usage")  # the final call's usage, folded in (issue 24.2)
        last = (f"; last call {u['agent']} {u['purpose']} on {u['model']}:"
                f" {u['prompt_tokens']}+{u['completion_tokens']} tokens" if u else "")
        return (f"turn finished ({p['stop_reason']}): {p['rounds']} tool round(s),"
                f" {p['model_calls']} model call(s){last}")
    return one_line(p, 200)


def _trigger_summary(t: str, p: dict[str, Any]) -> str:
    """Trigger invocations (core/triggers/events.py): what came in, what ran, what failed."""
    if t == "trigger.received":
        warn = f" ({p['warning']})" if p.get("warning") else ""
        missed = f", {p['missed']} missed fire(s) coalesced" if p.get("missed") else ""
        return f"{p['expert']}/{p['trigger']} {p['source']} event queued{missed}{warn}"
    if t == "trigger.skipped":
        return (f"{p['expert']}/{p['trigger']} duplicate {p['dedupe']!r} skipped (first:"
                f" {p['duplicate_of']})")
    if t == "trigger.claimed":
        how = " (recovered)" if p.get("recovered") else ""
        return f"attempt {p['attempt']} claimed by {p['owner']}{how}"
    if t == "trigger.linked":
        return f"attempt {p['attempt']} runs {p['run_id']}"
    if t == "trigger.paused":
        return f"waiting with {p['run_id']} for a decision"
    if t == "trigger.finished":
        d = p.get("delivery") or {}
        text = d.get("narrative") or one_line(d.get("structured"), 120)
        return f"delivered to {d.get('channel', 'main')}: {one_line(text, 160)}"
    if t == "trigger.failed":
        then = "retry scheduled" if p.get("retry_at") else p.get("action") or "failed"
        return f"attempt {p['attempt']} failed: {one_line(p['error'], 120)} ({then})"
    if t == "trigger.sla_breached":
        return f"SLA {p['sla']} breached after {p['elapsed_s']:.1f}s ({p['action']})"
    if t == "trigger.deadletter_retried":
        return f"dead letter sent back to its queue by {p['by']}"
    if t == "trigger.deadletter_dropped":
        return f"dead letter dropped by {p['by']}" + (f": {p['reason']}" if p.get("reason")
                                                      else "")
    if t == "trigger.escalation_resolved":
        return f"escalation acknowledged by {p['by']}"
    if t == "trigger.auth_failed":
        return (f"{p['expert']}/{p['trigger']} webhook from {p['address']} refused"
                f" [{p['error_id']}]: {one_line(p['reason'], 200)}")
    if t == "trigger.auth_throttled":
        who = "every address that failed" if p["address"] == "*" else p["address"]
        return (f"{p['expert']}/{p['trigger']}: {who} throttled (429) after {p['failures']}"
                f" refused credentials in {p['window_s']:g}s [{p['error_id']}]")
    return one_line(p, 200)
