"""A trace as a waterfall of text lines: one row per span, indented by parent, a bar on the
trace's shared time axis, the duration, tokens, and waits marked. Used by `clawtower trace`
(and meant for the console's trace view); plain text, every name through textsafe."""

from __future__ import annotations

from ..textsafe import safe_line
from .spans import Span, Trace

BAR = "█"
WAIT = "░"
OPEN = "▒"
MAX_NAME = 52


def duration_text(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.1f} min"


def _depths(trace: Trace) -> dict[str, int]:
    depth: dict[str, int] = {}
    for s in trace.spans:  # parents come first
        depth[s.span_id] = depth.get(s.parent_id or "", -1) + 1 if s.parent_id else 0
    return depth


def _label(s: Span) -> str:
    a = s.attributes
    tier = a.get("clawtower.tool.tier")
    name = s.name + (f" [{tier}]" if tier and tier != "auto" else "")
    return safe_line(name)


def _notes(s: Span) -> str:
    a = s.attributes
    notes = []
    tin, tout = a.get("gen_ai.usage.input_tokens"), a.get("gen_ai.usage.output_tokens")
    if tin is not None or tout is not None:
        notes.append(f"tokens {tin or 0}→{tout or 0}")
    if a.get("clawtower.wait"):
        who = a.get("clawtower.approval.decided_by")
        decision = a.get("clawtower.approval.decision")
        notes.append(f"WAIT {decision} by {who}" if who else "WAIT (undecided)")
    if a.get("clawtower.meeting.stance"):
        notes.append(str(a["clawtower.meeting.stance"]))
    if a.get("clawtower.flow.decision") == "decompose":
        notes.append(f"decomposed into {a.get('clawtower.flow.subtasks')}")
    if s.error:
        error = s.error.splitlines()[0] if s.error.strip() else s.error
        notes.append("ERROR " + (error if len(error) <= 60 else error[:59] + "…"))
    if a.get("clawtower.cancelled"):
        notes.append("cancelled")
    return safe_line("  ".join(notes))


def render(trace: Trace, *, width: int = 40, now: float | None = None) -> list[str]:
    """The waterfall's lines. An open span's bar runs to the trace's last known time."""
    if not trace.spans:
        return [f"trace {trace.trace_id} {trace.kind} {trace.root}: no spans"]
    t0 = min(s.start for s in trace.spans)
    ends = [s.end for s in trace.spans if s.end is not None] + [s.start for s in trace.spans]
    t1 = max(ends + ([now] if now is not None else []))
    total = max(t1 - t0, 1e-9)
    depth = _depths(trace)
    labels = [("  " * depth[s.span_id] + _label(s)) for s in trace.spans]
    col = min(max(len(x) for x in labels), MAX_NAME)
    n_open = sum(1 for s in trace.spans if s.open)
    head = (f"trace {trace.trace_id}  {trace.kind} {safe_line(trace.root)}  "
            f"{len(trace.spans)} spans  {duration_text(t1 - t0)}"
            + (f"  ({n_open} open)" if n_open else ""))
    axis = " " * col + " 0" + " " * max(width - 1 - len(duration_text(total)), 1) \
        + duration_text(total)
    lines = [head, axis]
    for s, label in zip(trace.spans, labels, strict=True):
        if len(label) > col:
            label = label[:col - 1] + "…"
        a = int((s.start - t0) / total * width)
        end = s.end if s.end is not None else t1
        b = max(round((end - t0) / total * width), a + 1)
        a, b = min(a, width - 1), min(b, width)
        mark = OPEN if s.open else WAIT if s.attributes.get("clawtower.wait") else BAR
        bar = " " * a + mark * (b - a) + " " * (width - b)
        dur = "open" if s.end is None else duration_text(s.end - s.start)
        notes = _notes(s)
        lines.append(f"{label:<{col}} │{bar}│ {dur:>8}" + (f"  {notes}" if notes else ""))
    return lines
