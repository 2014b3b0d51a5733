"""A whole model reply at once, without the turn loop: no tools, no gate, no steering.

Only the turn loop (core/agents/turns.py) and the named exceptions may call a model
directly; everything else that lets an agent act goes through a session turn, where the
spec's tools, approval tiers, budgets and steering apply. The exceptions, enforced by an
import-linter contract (pyproject.toml) and tests/test_model_calls_contract.py:

- core.agents.llm_task: a JSON answer to a schema (workflow `llm` steps, flow decisions);
- core.meetings.coordinator: a meeting reply is an opinion, no tools;
- core.orchestrator: a task's reviewers and executor answer in JSON, no tools;
- core.flows.brains: a flow's decompose / synthesise decision (execution is a session turn).

Each records its usage (`agent.usage`) like the turn does.
"""

from __future__ import annotations

from .provider import ChatRequest, ChatResult, Provider, ToolCall, Usage


async def complete(provider: Provider, request: ChatRequest) -> ChatResult:
    """Collect a stream into one result."""
    parts: list[str] = []
    calls: list[ToolCall] = []
    usage = Usage()
    finish = "stop"
    async for event in provider.stream(request):
        if event.kind == "text":
            parts.append(event.text)
        elif event.kind == "tool_call" and event.tool_call is not None:
            calls.append(event.tool_call)
        elif event.kind == "usage" and event.usage is not None:
            usage = event.usage
        elif event.kind == "done":
            finish = event.finish_reason or finish
    return ChatResult(text="".join(parts), tool_calls=calls, usage=usage, finish_reason=finish,
                      model=request.model, provider=provider.name)


__all__ = ["complete"]
