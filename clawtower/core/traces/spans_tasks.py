"""Tasks' spans: phases and attempts."""

from __future__ import annotations

from typing import Any

from .drafts import Event, _attrs, _Base
from .spans import CHAIN

TASK_TERMINAL = frozenset({"completed", "failed"})


class _TaskSpans(_Base):
    # tasks ------------------------------------------------------------------------

    def on_task_created(self, e: Event, p: Any) -> None:
        tid = e.entity_id
        d = self.root(e, tid, "task", f"task {tid}", CHAIN,
                      **{"clawtower.task": tid,
                         "input.value": self.text(p.title) if self.capture else None})
        self.task_phase[tid] = self.open(e, f"phase:{e.seq}", "phase spec_draft", CHAIN, d,
                                         **_attrs({"clawtower.task": tid,
                                                   "clawtower.task.phase": "spec_draft"}))

    def on_task_transitioned(self, e: Event, p: Any) -> None:
        tid = e.entity_id
        root = self.roots.get(tid)
        if root is None:
            return
        old = self.task_phase.pop(tid, None)
        if old is not None and old.end is None:
            old.close(e, **{"clawtower.task.reason": self.text(p.reason)[:200]
                            if self.capture else None})
        if p.to_phase in TASK_TERMINAL:
            self.end_root(e, tid, p.to_phase, failed=p.to_phase == "failed",
                          message=p.reason[:500])
            return
        self.task_phase[tid] = self.open(e, f"phase:{e.seq}", f"phase {p.to_phase}", CHAIN,
                                         root, **{"clawtower.task": tid,
                                                  "clawtower.task.phase": p.to_phase,
                                                  "clawtower.task.attempt": p.attempt})

    def on_attempt_started(self, e: Event, p: Any) -> None:
        tid = e.entity_id
        parent = self.task_phase.get(tid) or self.roots.get(tid)
        if parent is not None:
            self.task_attempt[(tid, p.attempt)] = self.open(
                e, f"attempt:{e.seq}", f"attempt {p.attempt}", CHAIN, parent,
                **{"clawtower.task": tid, "clawtower.attempt": p.attempt,
                   "gen_ai.request.model": p.model, "clawtower.runtime": p.runtime})

    def on_attempt_finished(self, e: Event, p: Any) -> None:
        d = self.task_attempt.get((e.entity_id, p.attempt))
        if d is not None and d.end is None:
            d.close(e, **{"clawtower.attempt.status": p.status})
            if p.status != "succeeded":
                d.error = p.reason[:500] or p.status
