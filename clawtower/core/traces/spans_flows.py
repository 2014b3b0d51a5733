"""Flows' spans: a flow, its nodes (under the node that decomposed into them)."""

from __future__ import annotations

from typing import Any

from .drafts import Event, _attrs, _Base
from .spans import AGENT, CHAIN


class _FlowSpans(_Base):
    # flows ------------------------------------------------------------------------

    def on_flow_started(self, e: Event, p: Any) -> None:
        fid = e.entity_id
        self.root(e, fid, "flow", f"invoke_workflow {fid}", CHAIN,
                  **{"gen_ai.operation.name": "invoke_workflow", "clawtower.flow": fid,
                     "gen_ai.agent.name": p.agent, "clawtower.flow.root_task": p.root_task,
                     "input.value": self.text(p.instruction) if self.capture else None})

    def on_flow_rerun(self, e: Event, p: Any) -> None:
        """A flow rerun from a node (issue 37): a flow of its own, naming its origin. Its
        reused replies are history (no spans); the coordinators above the node wait for it
        again, so they are open nodes from here, with the node's TASK sent under them."""
        fid = e.entity_id
        self.on_flow_started(e, p.started)
        flow = self.roots[fid]
        flow.attrs.update({"clawtower.flow.rerun_of": p.origin, "clawtower.flow.rerun_node":
                           p.node, "clawtower.flow.reused": sum(
                               1 for t in p.tasks if t.get("mode") == "reused")})
        for t in p.tasks:
            tid, parent = str(t.get("task_id")), t.get("parent_id")
            if parent:
                self.flow_parent[(fid, tid)] = str(parent)
                if t.get("status") != "done":
                    self.flow_children.setdefault((fid, str(parent)), set()).add(tid)
            if t.get("status") == "waiting":
                up = self.spans.get(f"node:{fid}:{parent}") if parent else None
                agent = str(t.get("agent") or "")
                d = self.open(e, f"node:{fid}:{tid}", f"node {tid} {agent}", AGENT, up or flow,
                              **_attrs({"gen_ai.operation.name": "invoke_agent",
                                        "gen_ai.agent.name": agent, "clawtower.flow": fid,
                                        "clawtower.flow.task": tid,
                                        "clawtower.flow.decision": "decompose"}))
                self.node_task[d.key] = (fid, tid)
                self.flow_agent_nodes.setdefault((fid, agent), []).append(d)

    def on_flow_task_sent(self, e: Event, p: Any) -> None:
        fid = e.entity_id
        flow = self.roots.get(fid)
        if flow is None:
            return
        parent_task = self.flow_parent.get((fid, p.task_id))
        parent = self.spans.get(f"node:{fid}:{parent_task}") if parent_task else None
        d = self.open(e, f"node:{fid}:{p.task_id}", f"node {p.task_id} {p.to_agent}", AGENT,
                      parent or flow, **{"gen_ai.operation.name": "invoke_agent",
                                         "gen_ai.agent.name": p.to_agent,
                                         "clawtower.flow": fid, "clawtower.flow.task": p.task_id,
                                         "clawtower.flow.from": p.from_agent,
                                         "clawtower.session": p.session_id or None})
        if self.capture:
            d.attrs["input.value"] = self.text(p.instruction)
        self.node_task[d.key] = (fid, p.task_id)
        self.flow_agent_nodes.setdefault((fid, p.to_agent), []).append(d)
        if p.session_id:
            self.flow_open.setdefault(p.session_id, []).append(d)
            self.node_session[d.key] = p.session_id

    def on_flow_decomposed(self, e: Event, p: Any) -> None:
        fid = e.entity_id
        # a subtask's task id is its coordinator's task id / its id in the plan
        subs = [f"{p.task_id}/{s.get('id')}" for s in p.subtasks]
        for s in subs:
            self.flow_parent[(fid, s)] = p.task_id
        self.flow_children[(fid, p.task_id)] = set(subs)
        d = self.spans.get(f"node:{fid}:{p.task_id}")
        if d is not None:
            d.attrs.update({"clawtower.flow.decision": "decompose",
                            "clawtower.flow.subtasks": len(subs),
                            "clawtower.flow.decompose_tokens": p.tokens})
            d.last_seq = e.seq

    def on_flow_replied(self, e: Event, p: Any) -> None:
        fid = e.entity_id
        d = self.spans.get(f"node:{fid}:{p.task_id}")
        parent = self.flow_parent.get((fid, p.task_id))
        if parent is not None:
            self.flow_children.get((fid, parent), set()).discard(p.task_id)
        if d is None or d.end is not None:
            return
        d.attrs.setdefault("clawtower.flow.decision", p.mode or "execute")
        d.close(e, **{"clawtower.flow.mode": p.mode or None, "clawtower.flow.tokens": p.tokens,
                      "clawtower.flow.reply": p.kind})
        if p.kind == "ERROR":
            d.error = p.mode or "failed"
            d.attrs["error.type"] = p.mode or "flow_error"
        if self.capture:
            d.attrs["output.value"] = self.text(p.body)
        sid = self.node_session.pop(d.key, "")
        if d in self.flow_open.get(sid, ()):
            self.flow_open[sid].remove(d)

    def on_flow_finished(self, e: Event, p: Any) -> None:
        self.end_root(e, e.entity_id, p.status, failed=p.status != "done",
                      message=p.error or p.status)
