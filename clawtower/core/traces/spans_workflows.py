"""Workflow runs' spans (steps, gates) and trigger invocations' (a run a trigger started
is a child of its attempt)."""

from __future__ import annotations

from typing import Any

from .drafts import Event, _Base, _Draft
from .spans import CHAIN


class _WorkflowSpans(_Base):
    def on_workflow_started(self, e: Event, p: Any) -> None:
        run = e.entity_id
        link = self.pre.run_trigger.get(run)
        parent = self.trigger_attempt.get(link) if link is not None else None
        if parent is None and link is not None:
            parent = self.roots.get(link[0])
        name = p.name or p.file
        attrs = {"gen_ai.operation.name": "invoke_workflow", "clawtower.workflow": run,
                 "clawtower.workflow.file": p.file, "clawtower.workflow.name": p.name or None}
        if parent is None:
            self.root(e, run, "workflow", f"invoke_workflow {name}", CHAIN, **attrs)
        else:
            d = self.open(e, f"workflow:{e.seq}", f"invoke_workflow {name}", CHAIN, parent,
                          **attrs)
            self.roots[run] = d
            parent.root().aliases.append(run)
        self.step_open[run] = {}

    def on_workflow_rerun(self, e: Event, p: Any) -> None:
        """A run from a step of another (issue 37): a run of its own, naming its origin; the
        reused steps' outputs are history (no spans)."""
        self.on_workflow_started(e, p.started)
        self.roots[e.entity_id].attrs.update({
            "clawtower.workflow.rerun_of": p.origin, "clawtower.workflow.from_step":
            p.from_step, "clawtower.workflow.reused": len(p.reused)})

    def on_workflow_step_started(self, e: Event, p: Any) -> None:
        run = e.entity_id
        wf = self.roots.get(run)
        if wf is None:
            return
        self.step_open.setdefault(run, {})[p.step_id] = self.open(
            e, f"step:{e.seq}", f"step {p.step_id}", CHAIN, wf,
            **{"clawtower.workflow": run, "clawtower.workflow.step": p.step_id,
               "clawtower.workflow.step.kind": p.kind, "clawtower.workflow.step.index": p.index,
               "clawtower.workflow.step.attempt": p.attempt})

    def end_step(self, e: Event, run: str, step_id: str, **attrs: Any) -> _Draft | None:
        d = self.step_open.get(run, {}).pop(step_id, None)
        if d is not None:
            d.close(e, **attrs)
        return d

    def on_workflow_step_finished(self, e: Event, p: Any) -> None:
        d = self.end_step(e, e.entity_id, p.step_id)
        if d is not None and p.cost:
            d.attrs["clawtower.cost_usd"] = sum(float(c.get("usd", c.get("cost_usd", 0)) or 0)
                                                for c in p.cost if isinstance(c, dict))
        if p.next is not None:
            self.on_workflow_step_started(e, p.next)

    def on_workflow_step_skipped(self, e: Event, p: Any) -> None:
        self.on_workflow_step_started(e, p)
        self.end_step(e, e.entity_id, p.step_id, **{"clawtower.workflow.step.skipped": True})

    def on_workflow_step_failed(self, e: Event, p: Any) -> None:
        d = self.end_step(e, e.entity_id, p.step_id,
                          **{"clawtower.workflow.step.policy": p.policy,
                             "clawtower.workflow.step.retrying": p.retrying})
        if d is not None:
            d.error = p.error[:500]
            d.attrs["error.type"] = "step_failed"

    def on_workflow_paused(self, e: Event, p: Any) -> None:
        run = e.entity_id
        if p.started is not None:
            self.on_workflow_step_started(e, p.started)
        if p.asked is not None:
            self.approval_asked[p.approval_id] = e
        parent = self.step_open.get(run, {}).get(p.step_id) or self.roots.get(run)
        if parent is None:
            return
        g = self.open(e, f"gate:{e.seq}", f"gate {p.gate} {p.step_id}", CHAIN, parent,
                      **{"clawtower.workflow": run, "clawtower.workflow.gate": p.gate,
                         "clawtower.approval": p.approval_id, "clawtower.wait": True})
        self.gate_open[run] = g
        self.approval_span[p.approval_id] = g

    def on_workflow_resumed(self, e: Event, p: Any) -> None:
        g = self.gate_open.pop(e.entity_id, None)
        if g is None:
            return
        aid = str(g.attrs.get("clawtower.approval", ""))
        self.decide(e, aid, p.decision, p.by or e.actor)

    def on_workflow_finished(self, e: Event, p: Any) -> None:
        self.end_run(e, "finished")

    def on_workflow_cancelled(self, e: Event, p: Any) -> None:
        self.end_run(e, "cancelled", failed=True, message=p.reason or "cancelled")

    def on_workflow_failed(self, e: Event, p: Any) -> None:
        self.end_run(e, "failed", failed=True, message=p.error[:500])

    def end_run(self, e: Event, status: str, *, failed: bool = False,
                message: str = "") -> None:
        run = e.entity_id
        for step_id in list(self.step_open.get(run, {})):
            self.end_step(e, run, step_id)
        self.step_open.pop(run, None)
        self.end_root(e, run, status, failed=failed, message=message)

    def on_trigger_received(self, e: Event, p: Any) -> None:
        self.root(e, e.entity_id, "trigger", f"trigger {p.expert}/{p.trigger}", CHAIN,
                  **{"clawtower.trigger": e.entity_id, "clawtower.trigger.name": p.trigger,
                     "clawtower.expert": p.expert, "clawtower.trigger.source": p.source})

    def on_trigger_skipped(self, e: Event, p: Any) -> None:
        d = self.root(e, e.entity_id, "trigger", f"trigger {p.expert}/{p.trigger}", CHAIN,
                      **{"clawtower.trigger": e.entity_id, "clawtower.expert": p.expert,
                         "clawtower.trigger.duplicate_of": p.duplicate_of})
        d.close(e)

    def on_trigger_claimed(self, e: Event, p: Any) -> None:
        root = self.roots.get(e.entity_id)
        if root is not None:
            self.trigger_attempt[(e.entity_id, p.attempt)] = self.open(
                e, f"attempt:{e.seq}", f"attempt {p.attempt}", CHAIN, root,
                **{"clawtower.trigger": e.entity_id, "clawtower.attempt": p.attempt,
                   "clawtower.recovered": p.recovered or None})

    def on_trigger_finished(self, e: Event, p: Any) -> None:
        a = self.trigger_attempt.get((e.entity_id, p.attempt))
        if a is not None and a.end is None:
            a.close(e)
        self.end_root(e, e.entity_id, "done")

    def on_trigger_failed(self, e: Event, p: Any) -> None:
        a = self.trigger_attempt.get((e.entity_id, p.attempt))
        if a is not None and a.end is None:
            a.close(e)
            a.error = p.error[:500]
        if p.retry_at is None:
            self.end_root(e, e.entity_id, p.action or "failed", failed=True,
                          message=p.error[:500])
