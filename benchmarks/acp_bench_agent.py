"""A minimal ACP agent on the official SDK, for bench_acp_permission.py: each prompt
"N" asks `session/request_permission` N times in a row (an `edit` tool call each) and logs,
per request, the CLOCK_MONOTONIC time just before sending it and just after its answer
arrived (one JSON line each to the file named by $ACP_BENCH_LOG). Monotonic time is one
clock for every process of the machine, so the benchmark can line it up with its own."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from acp import PROTOCOL_VERSION, run_agent
from acp.schema import (
    AgentCapabilities,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ToolCallUpdate,
)


class BenchAgent:
    def __init__(self) -> None:
        self.conn: Any = None
        self.log = open(os.environ["ACP_BENCH_LOG"], "a", encoding="utf-8")  # noqa: SIM115

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kw: Any) -> InitializeResponse:
        return InitializeResponse(protocol_version=PROTOCOL_VERSION,
                                  agent_capabilities=AgentCapabilities())

    async def new_session(self, cwd: str, **kw: Any) -> NewSessionResponse:
        return NewSessionResponse(session_id="bench")

    async def prompt(self, prompt: list[Any], session_id: str, **kw: Any) -> PromptResponse:
        n = int(prompt[0].text)
        options = [PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                   PermissionOption(option_id="reject", name="Reject", kind="reject_once")]
        for i in range(n):
            sent = time.monotonic()
            answer = await self.conn.request_permission(
                session_id=session_id, options=options,
                tool_call=ToolCallUpdate(tool_call_id=f"call_{i}", title=f"edit {i}",
                                         kind="edit", status="pending"))
            got = time.monotonic()
            self.log.write(json.dumps({"i": i, "sent": sent, "got": got,
                                       "outcome": answer.outcome.outcome}) + "\n")
            self.log.flush()
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kw: Any) -> None:
        return None


if __name__ == "__main__":
    asyncio.run(run_agent(BenchAgent()))  # type: ignore[arg-type]
