"""Event one-liners (core/describe.py): every workflow, turn and tool event reads as a
sentence in `clawtower events` and the console's event log, not as a payload dump."""

from __future__ import annotations

from pathlib import Path

from clawtower.core import open_store
from clawtower.core.describe import event_summary
from clawtower.core.workflows.service import Workflows

FLOW = """\
name: demo
steps:
  - id: hello
    run: echo hi
  - id: skip
    when: false
    run: echo never
  - id: gate
    approval: Ship it?
  - id: fail
    run: exit 3
    on_error: continue
"""


async def test_a_workflow_runs_events_read_as_sentences(tmp_path: Path) -> None:
    flow = tmp_path / "demo.lobster"
    flow.write_text(FLOW)
    store = await open_store(tmp_path / "s.db")
    try:
        wf = Workflows(store, actor="alice", stderr=lambda _t: None)
        env = await wf.run(str(flow))
        await wf.resume(token=env["requiresApproval"]["resumeToken"], approve=True,
                        approved_by="bob")
        events = [e for e in await store.events_after(0) if e.type.startswith("workflow.")]
    finally:
        await store.close()
    lines = {e.type: event_summary(e) for e in events}
    assert lines["workflow.started"] == "workflow started: demo (4 steps)"
    assert lines["workflow.step_skipped"] == "step skip skipped (condition false)"
    assert lines["workflow.paused"].startswith("waiting for approval at step gate (approval ")
    assert lines["workflow.resumed"] == "step gate approved by bob; resumed"
    assert lines["workflow.step_failed"].startswith("step fail failed (on_error continue):")
    assert "workflow command failed (3)" in lines["workflow.step_failed"]
    assert lines["workflow.finished"].startswith("workflow finished:")
    for line in lines.values():
        assert "{" not in line.split(":", 1)[0]  # never a raw payload dump


def test_an_event_with_no_sentence_reads_as_key_value_text_not_a_python_dict() -> None:
    from clawtower.core.events import StoredEvent
    from clawtower.core.flows.events import FlowStarted

    payload = FlowStarted(agent="ada", instruction="check logs", root_task="F-1/root",
                          limits={"max_depth": 6}, split=False, by="")
    e = StoredEvent(seq=1, ts=0.0, entity="flow", entity_id="F-1", type="flow.started",
                    actor="root", role="agent", payload=payload)
    line = event_summary(e)
    assert "{'" not in line and "False" not in line, line
    assert line == ("agent: ada, instruction: check logs, context: {}, root_task: F-1/root,"
                    ' limits: {"max_depth": 6}, split: false'), line
