"""Issue 24.2: a Lobster workflow step in at most two events. The facts that were split (a
step's result + the next step's start; a gate's start + its lease let go + its approvals
item + the pause; the gate's decision + the resume + the lease taken) are one event each.

`tests/data/workflows_log_pre_24_2.jsonl` is a log written by the release before (a run of
three shell steps, a skip, a failure that continues, two approval gates, an input gate and a
last step; a second run rejected at its first gate). It must still replay (`store verify`,
`rebuild`), and the same log folded into the new shapes must project exactly the same rows
(only the sequence numbers move, as events are fewer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from folded_logs import import_log, read_log, same_as_folded

from clawtower.core import events as ev
from clawtower.core.describe import event_summary
from clawtower.core.events import StoredEvent
from clawtower.core.workflows import events as wev
from clawtower.core.workflows.service import Workflows

OLD_LOG = Path(__file__).parent / "data" / "workflows_log_pre_24_2.jsonl"

# the projected tables a run writes, each with a key that does not depend on seq
TABLES = {"workflow_runs": "id", "workflow_steps": "run_id, step_id", "approvals": "id",
          "leases": "name"}




def _with(e: StoredEvent, **update: Any) -> StoredEvent:
    return e.model_copy(update={"payload": e.payload.model_copy(update=update)})


def _fold(events: list[StoredEvent]) -> list[StoredEvent]:
    """The old log written as the new code writes it (what each merge means, spelled out)."""
    out: list[StoredEvent] = []
    gate: dict[str, list[StoredEvent]] = {}  # run id -> its gate's parts, before the pause
    decided: dict[str, StoredEvent] = {}  # approval id -> its decision, before the resume
    for e in events:
        p = e.payload
        prev = out[-1] if out else None
        if isinstance(p, wev.WorkflowStepStarted) and p.kind in ("approval", "input"):
            gate[e.entity_id] = [e]
            continue
        if isinstance(p, wev.WorkflowStepStarted) and prev is not None and isinstance(
                prev.payload, wev.WorkflowStepFinished) and prev.entity_id == e.entity_id:
            out[-1] = _with(prev, next=p)  # a result carries the next step's start
            continue
        if isinstance(p, ev.LeaseReleased | ev.ApprovalRequested):
            run = e.entity_id.split(":", 1)[1] if isinstance(p, ev.LeaseReleased) else p.subject
            if run in gate:
                gate[run].append(e)
                continue
        if isinstance(p, wev.WorkflowPaused):
            parts = {type(x.payload): x for x in gate.pop(e.entity_id)}
            asked = parts[ev.ApprovalRequested]
            e = _with(e, started=parts[wev.WorkflowStepStarted].payload,
                      released=parts[ev.LeaseReleased].payload, asked=asked.payload,
                      asked_by=asked.actor, asked_role=asked.role)
        if isinstance(p, ev.ApprovalDecided) and p.decision in ("approved", "answered"):
            decided[e.entity_id] = e
            continue
        if isinstance(p, wev.WorkflowResumed):
            (aid,) = [a for a, d in decided.items() if d.actor == e.actor]
            e = _with(e, approval_id=aid, decided=decided.pop(aid).payload)
        if isinstance(p, ev.LeaseAcquired) and prev is not None and isinstance(
                prev.payload, wev.WorkflowResumed) and p.took_over_from is None:
            out[-1] = _with(prev, lease=p)
            continue
        out.append(e)
    assert not gate and not decided
    return [x.model_copy(update={"seq": i}) for i, x in enumerate(out, 1)]








async def test_a_log_of_the_release_before_replays_and_verifies(store: Any) -> None:
    await import_log(store, read_log(OLD_LOG))
    assert await store.verify_projections() == []
    await store.rebuild_projections()
    assert await store.verify_projections() == []
    runs = await store.fetchall("SELECT id, status, error FROM workflow_runs ORDER BY num")
    assert runs == [{"id": "W-1", "status": "ok", "error": None},
                    {"id": "W-2", "status": "cancelled", "error": "rejected: no"}]
    steps = await store.fetchall("SELECT step_id, status FROM workflow_steps WHERE"
                                 " run_id='W-1' ORDER BY idx")
    assert [(s["step_id"], s["status"]) for s in steps] == [
        ("start", "done"), ("plain1", "done"), ("skipme", "skipped"), ("flaky", "failed"),
        ("gate0", "done"), ("gate1", "done"), ("ask", "done"), ("after", "done")]
    approvals = await store.fetchall("SELECT status, decided_by FROM approvals ORDER BY seq")
    assert [(a["status"], a["decided_by"]) for a in approvals] == [
        ("approved", "bob"), ("approved", "carol"), ("answered", "dave"),
        ("rejected", "alice")]
    leases = await store.fetchall("SELECT released FROM leases")
    assert [x["released"] for x in leases] == [1, 1]


async def test_the_folded_log_projects_the_same_rows_in_fewer_events(store: Any,
                                                                     tmp_path: Path) -> None:
    old = read_log(OLD_LOG)
    new = _fold(old)
    await same_as_folded(store, old, new, TABLES, tmp_path / "folded.db")
    # a start right after a result (plain1, in each run: a skip or a resume comes before
    # the others): 2; each of four gates' start, lease, approvals item (3 x 4); each of the
    # three resumes' decision and lease (2 x 3). 56 events -> 36.
    assert (len(old), len(new)) == (56, 56 - 2 - 3 * 4 - 2 * 3)


async def test_a_gate_and_a_plain_step_each_write_two_events(store: Any,
                                                             tmp_path: Path) -> None:
    """What the new code writes: resume -> next gate persisted, and a shell step between
    two others, each in two events; the console's and `events`' lines say what they carry."""
    flow = tmp_path / "f.lobster"
    flow.write_text("steps:\n  - id: a\n    run: echo a\n  - id: b\n    run: echo b\n"
                    "  - id: c\n    run: echo c\n  - id: g1\n    approval: one?\n"
                    "  - id: g2\n    approval: two?\n")
    wf = Workflows(store, actor="alice", cwd=str(tmp_path), stderr=lambda _t: None)
    env = await wf.run(str(flow))
    first = await store.events_after(0, 1000)
    env = await wf.resume(token=env["requiresApproval"]["resumeToken"], approve=True,
                          approved_by="bob", reason="fine")
    assert env["status"] == "needs_approval"
    cycle = await store.events_after(first[-1].seq, 1000)
    assert [e.type for e in cycle] == ["workflow.resumed", "workflow.paused"]
    b = [e for e in first if getattr(e.payload, "step_id", None) == "b"
         or getattr(getattr(e.payload, "next", None), "step_id", None) == "b"]
    assert [e.type for e in b] == ["workflow.step_finished", "workflow.step_spawned",
                                   "workflow.step_finished"]  # a's result + b's start
    assert len([e for e in b if e.payload.step_id == "b"]) == 2
    resumed, paused = cycle
    a1, a2 = await store.fetchall("SELECT id, status, decided_by, reason FROM approvals"
                                  " ORDER BY seq")
    assert (a1["status"], a1["decided_by"], a1["reason"]) == ("approved", "bob", "fine")
    assert a2["status"] == "pending" and paused.payload.approval_id == a2["id"]
    lease = await store.fetchone("SELECT released FROM leases WHERE name='workflow:W-1'")
    assert lease == {"released": 1}
    row = await store.fetchone("SELECT status, waiting_step FROM workflow_runs")
    assert row == {"status": "paused", "waiting_step": "g2"}
    steps = await store.fetchall("SELECT step_id, status FROM workflow_steps ORDER BY idx")
    assert [s["status"] for s in steps] == ["done"] * 4 + ["waiting"]
    assert event_summary(resumed).startswith("step g1 approved by bob: fine; resumed")
    a_done = next(e for e in first if getattr(e.payload, "step_id", None) == "a"
                  and e.type == "workflow.step_finished")
    assert event_summary(a_done) == "step a done: a; step b (shell) started"
    assert await store.verify_projections() == []
    await store.rebuild_projections()
    assert await store.verify_projections() == []
