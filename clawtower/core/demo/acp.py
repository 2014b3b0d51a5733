"""An ACP session for the console's pictures and demos: a session whose agent spec names a
harness, and one turn of it as Zed's example agent plays it (message chunks, a `read` tool
call, a plan, an `edit` with its diff), stopped at its permission request, which waits in
the approvals list. Written through the same events and payload builders as a live run
(core.acp.client), with fixed ids: the pictures are reproducible and need no harness.
"""

from __future__ import annotations

from ..acp import events as aev
from ..acp.client import permission_payloads
from ..events import NewEvent, Payload
from ..sessions.service import Sessions
from ..sessions.specs import AgentSpecConfig
from ..store.interface import Store

RUN_ID = "acp-demo0000001"
APPROVAL_ID = "A-acp-demo001"
WORKSPACE = "/srv/acme-shop"
CONFIG = f"{WORKSPACE}/config.json"
OPTIONS = [{"option_id": "allow", "name": "Allow this change", "kind": "allow_once"},
           {"option_id": "reject", "name": "Skip this change", "kind": "reject_once"}]


async def seed_acp(store: Store) -> str:
    """Seed the session and its turn up to the pending request; returns the session id."""
    s = Sessions(store)
    await s.set_spec("coder", AgentSpecConfig.model_validate({"defaults": {"acp": {
        "name": "zed-example", "command": "tsx", "args": ["agent.ts"], "cwd": WORKSPACE}}}),
        source="demo", by="demo")
    sid = await s.create(agent="coder", title="Config clean-up (ACP)", by="demo")
    await s.send(sid, "Tighten the service config: shorter timeouts, no debug logging.",
                 sender="demo")
    asked, request = permission_payloads(
        run_id=RUN_ID, harness="zed-example", workspace=WORKSPACE, call_id="call_2",
        tool_kind="edit", title="Modifying critical configuration file", locations=[CONFIG],
        command="", options=OPTIONS)
    diff = {"type": "diff", "path": CONFIG,
            "old_text": '{"timeout_s": 120, "log_level": "debug"}',
            "new_text": '{\n  "timeout_s": 30,\n  "log_level": "info"\n}'}

    def run(*payloads: Payload) -> list[NewEvent]:
        return [NewEvent(entity_id=RUN_ID, actor="acp:zed-example", role="agent", payload=p)
                for p in payloads]

    await store.append([
        *run(aev.AcpRunStarted(harness="zed-example", workspace=WORKSPACE,
                               prompt="Tighten the service config", subject=sid,
                               command=["tsx", "agent.ts"], driver="demo"),
             aev.AcpRunInitialized(protocol_version=1, acp_session_id="demo"),
             aev.AcpText(text="I'll help you with that. Let me start by reading some files"
                              " to understand the current situation."),
             aev.AcpToolCall(call_id="call_1", title="Reading project files", kind="read",
                             status="completed", locations=[f"{WORKSPACE}/README.md"]),
             aev.AcpPlan(entries=[
                 {"content": "Read the service config", "priority": "high",
                  "status": "completed"},
                 {"content": "Shorten timeouts, drop debug logging", "priority": "high",
                  "status": "in_progress"}]),
             aev.AcpToolCall(call_id="call_2", title="Modifying critical configuration file",
                             kind="edit", status="pending", locations=[CONFIG],
                             content=[diff])),
        NewEvent(entity_id=APPROVAL_ID, actor="acp:zed-example", role="agent", payload=asked),
        NewEvent(entity_id=APPROVAL_ID, actor="acp:zed-example", role="agent",
                 payload=request)])
    return sid


__all__ = ["APPROVAL_ID", "RUN_ID", "seed_acp"]
