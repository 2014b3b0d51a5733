"""`traces export` into a real Arize Phoenix (opt-in peer: `--run-phoenix` or -m phoenix;
scripts/install-peers.sh phoenix): a session tree with three subagents and a tool call that
waited for approval, a flow, and a workflow run with a gate, read back through Phoenix's REST
API: names, span kinds, parents, durations and token counts as derived."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from phoenix_peer import free_port, phoenix_server, spans_of
from session_helpers import run_idle
from trace_helpers import session_tree

from clawtower.core.approvals import Approvals
from clawtower.core.sessions.service import Sessions
from clawtower.core.store import open_store
from clawtower.core.traces import load
from clawtower.core.traces.config import TelemetryConfig
from clawtower.core.traces.live import TracesWorker
from clawtower.core.traces.otlp import export

pytestmark = [pytest.mark.phoenix, pytest.mark.xdist_group("phoenix")]

GATED = """
steps:
  - id: prep
    run: echo '{"count":2}'
  - id: gate
    approval: "Apply changes?"
    stdin: $prep.json
  - id: after
    run: echo "done $gate.approvedBy"
    when: $gate.approved
"""


async def three_kinds(tmp_path: Path) -> Path:
    from test_flows_turns import CALL, engine, setup

    from clawtower.core.flows.service import Flows
    from clawtower.core.workflows.service import Workflows

    db = tmp_path / "db.sqlite"
    await session_tree(db)
    store = await open_store(db)
    try:
        await setup(store)
        plan = [{"id": f"n{i}", "agent": "worker", "instruction": CALL, "depends_on": []}
                for i in range(3)]
        fid = await Flows(store).start("lead", "count words")
        assert (await engine(store, {"root": plan}).run_flow(fid, timeout_s=60))["status"] \
            == "done"
        (tmp_path / "wf.lobster").write_text(GATED)
        wf = Workflows(store, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                       cwd=str(tmp_path), stderr=lambda s: None)
        env: dict[str, Any] = await wf.run(str(tmp_path / "wf.lobster"))
        await Approvals(store).approve(env["requiresApproval"]["approvalId"], by="ops")
    finally:
        await store.close()
    return db


def _ns(value: Any) -> float:
    """Phoenix's times (ISO 8601 strings) as Unix seconds."""
    from datetime import datetime

    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def _attr(span: dict[str, Any], key: str) -> Any:
    attrs = span.get("attributes") or {}
    if key in attrs:
        return attrs[key]
    node: Any = attrs
    for part in key.split("."):  # nested form
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


async def test_phoenix_reads_back_what_was_exported(tmp_path: Path) -> None:
    db = await three_kinds(tmp_path)
    store = await open_store(db)
    try:
        traces = await load(store)
    finally:
        await store.close()
    assert sorted(t.kind for t in traces) == ["flow", "session", "workflow"]
    ours = {s.span_id: s for t in traces for s in t.spans}
    with phoenix_server(tmp_path / "phoenix") as base:
        sent = await asyncio.to_thread(export, traces, base, service_name="clawtower-test")
        assert sent == len(ours)
        got = await asyncio.to_thread(spans_of, base, "clawtower-test", sent)
    assert len(got) == sent
    for p in got:
        s = ours[p["context"]["span_id"]]
        assert p["name"] == s.name
        assert p["context"]["trace_id"] == s.trace_id
        assert (p.get("parent_id") or None) == s.parent_id
        assert p["span_kind"] == s.kind
        assert _ns(p["end_time"]) - _ns(p["start_time"]) == pytest.approx(
            s.duration, abs=2e-3)
        for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
                    "llm.token_count.prompt"):
            if key in s.attributes:
                assert _attr(p, key) == s.attributes[key], (s.name, key)
    names = [p["name"] for p in got]
    assert names.count("session S-2 (worker)") == 1
    assert names.count("approval clock.now") == 1
    assert names.count("gate approval gate") == 1
    assert names.count("execute_tool text.count") == 3
    (wait,) = [p for p in got if p["name"] == "approval clock.now"]
    assert _attr(wait, "clawtower.approval.decided_by") == "bob"


async def test_phoenix_down_then_up_the_live_exporter_loses_nothing(tmp_path: Path) -> None:
    """The engine's live exporter against a real Phoenix that stops: the step fails and its
    position stays; new work meanwhile; Phoenix restarted on its port and data: the next
    step sends what was left, and Phoenix holds every span once. Phoenix keeps the first
    copy of a span id (its insert does nothing on conflict), so the top-level session's
    span, sent again when its end moved, keeps its first end there."""
    db = tmp_path / "db.sqlite"
    sid = await session_tree(db)
    port, work, project = free_port(), tmp_path / "phoenix", "clawtower-live"
    store = await open_store(db)
    try:
        def worker(url: str, timeout_s: float) -> TracesWorker:
            return TracesWorker(store, TelemetryConfig(
                otlp_endpoint=url, service_name=project, timeout_s=timeout_s))

        with phoenix_server(work, port) as base:
            assert await worker(base, 60).step() == 24
            assert len(await asyncio.to_thread(spans_of, base, project, 24)) == 24
        await Sessions(store).send(sid, "hello again", sender="alice")
        await run_idle(store, sid)
        down = worker(base, 1)
        with pytest.raises(Exception, match="did not take the spans"):
            await down.step()
        assert down.position is not None and down.position < await store.last_seq()
        with phoenix_server(work, port) as again:
            assert again == base
            assert await worker(base, 60).step() == 3  # two new spans, the session's again
            got = await asyncio.to_thread(spans_of, base, project, 26)
        ids = [p["context"]["span_id"] for p in got]
        assert len(ids) == len(set(ids)) == 26
        (trace,) = await load(store)
        assert set(ids) == {s.span_id for s in trace.spans}
    finally:
        await store.close()
