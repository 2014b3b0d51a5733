"""Events in, spans out: one walk over the log in seq order.

What becomes a span (the events it comes from):
- a session (`session.created` .. `session.finished`, or the job that ended it; a top-level
  session that is idle ends with its last job), its agent turns (`invoke_agent {agent}`:
  `turnjob.started`/`turn.started` .. `turn.finished`, or the `turnjob.finished` that
  carries it), each model call (`chat {model}`: from the turn's previous event to the
  `agent.usage` committed with the round's tool calls, or the usage folded into the turn's
  end), each tool call (`execute_tool {tool}`: its first
  `turn.tool_called` .. its `turn.tool_result`, across a resumed turn of the same job) and a
  confirm-tier call's approval wait (`approval.requested` .. `approval.decided`, naming who
  decided). A child session is a child of the parent's turn that was running when it was
  created.
- a flow (`flow.started` .. `flow.finished`), each node (`flow.task_sent` .. `flow.replied`,
  children of the node that decomposed into them); the turns of a flow's sessions are
  children of the node their session was working on.
- a workflow run, its steps and gates (an approval or input gate's wait); a run started by
  a trigger is a child of that invocation's attempt.
- a meeting, its rounds, each reply (an `invoke_agent` span of the reply's elapsed time) and
  each rolling summary.
- a task, its phases and attempts; approvals on it.

Content (messages, replies, tool arguments and results) is included only with
`capture_content`, after `redact(tool_name, text)` and textsafe.safe.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..textsafe import safe
from . import ids
from .drafts import Event, Redact, _Draft
from .spans import Span, Trace
from .spans_flows import _FlowSpans
from .spans_meetings import _MeetingSpans
from .spans_sessions import _SessionSpans
from .spans_tasks import _TaskSpans
from .spans_workflows import _WorkflowSpans


class _Builder(_SessionSpans, _FlowSpans, _WorkflowSpans, _MeetingSpans, _TaskSpans):
    """One walk over the log: each event to its `on_<type>` handler (spans_*.py)."""

    # ------------------------------------------------------------------- the walk

    def run(self) -> list[Trace]:
        for e in self.events:
            handler = getattr(self, "on_" + e.type.replace(".", "_"), None)
            if handler is not None:
                handler(e, e.payload)
            self.last_ts[e.entity_id] = e.ts  # after: a handler sees the one before
        return self.finish()

    # ------------------------------------------------------------------- finishing

    def finish(self) -> list[Trace]:
        ids_of: dict[int, str] = {}
        for d in self.spans.values():
            ids_of[id(d)] = ids.span_id(self.salt, d.key)
        by_root: dict[int, list[_Draft]] = {}
        for d in self.spans.values():
            by_root.setdefault(id(d.root()), []).append(d)
        traces = []
        for members in by_root.values():
            root = members[0].root()
            if not root.root_id:
                continue
            tid = ids.trace_id(self.salt, root.key)
            spans = tuple(Span(
                trace_id=tid, span_id=ids_of[id(d)],
                parent_id=ids_of[id(d.parent)] if d.parent is not None else None,
                name=safe(d.name).replace("\n", " "), kind=d.kind, start=d.start,
                end=None if d.end is None else max(d.end, d.start),
                attributes=dict(d.attrs), error=d.error, first_seq=d.first_seq,
                last_seq=d.last_seq) for d in _ordered(members))
            traces.append(Trace(trace_id=tid, root=root.root_id, kind=root.root_kind,
                                spans=spans, aliases=tuple(root.aliases)))
        traces.sort(key=lambda t: t.spans[0].first_seq)
        return traces


def _ordered(members: list[_Draft]) -> list[_Draft]:
    """Depth first from the root, children by (start, seq): the waterfall's row order."""
    kids: dict[int, list[_Draft]] = {}
    roots = []
    for d in members:
        if d.parent is None:
            roots.append(d)
        else:
            kids.setdefault(id(d.parent), []).append(d)
    out: list[_Draft] = []
    stack = sorted(roots, key=lambda d: (d.start, d.first_seq), reverse=True)
    while stack:
        d = stack.pop()
        out.append(d)
        stack.extend(sorted(kids.get(id(d), []), key=lambda c: (c.start, c.first_seq),
                            reverse=True))
    return out


def derive(events: Iterable[Event], *, salt: str = "",
           capture_content: bool = False, redact: Redact | None = None) -> list[Trace]:
    """Every trace the events hold, oldest first. Pure: the same events give the same
    traces, ids and all. `salt`: the store's identity (read.store_salt)."""
    return _Builder(list(events), salt=salt, capture_content=capture_content,
                    redact=redact).run()


__all__ = ["Event", "Redact", "derive"]
