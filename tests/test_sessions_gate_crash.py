"""A waiting tool call across crashes: the worker that paused it is killed (-9), the call is
approved from another process, a new worker runs it exactly once. And the two states a kill
-9 can leave around an approved call: its intent committed without a result (the call is
not run again; the model is told) and its result committed before the job finished (the
result is reused, the call not run again)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

from test_sessions_crash import start_worker, wait_until

from clawtower.core.agents.provider import ToolCall
from clawtower.core.approvals import Approvals
from clawtower.core.sessions import gate
from clawtower.core.sessions.service import Sessions
from clawtower.core.store import open_store
from clawtower.core.tools.types import ToolResult
from tests.helpers.session_helpers import event_types, run_idle, runner, spec

CONFIRM = {"policy": {"tools": ["clock.now"], "approval": {"default": "confirm"}}}


async def results(store: Any) -> list[dict[str, Any]]:
    return [e["payload"] for e in await event_types(store, "turn.tool_result")
            if e["payload"]["name"] == "clock.now"]


async def test_kill_9_while_waiting_then_approve_from_another_process(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    store = await open_store(str(db))
    try:
        sessions = Sessions(store)
        await spec(sessions, "clerk", **CONFIRM)
        sid = await sessions.create(agent="clerk")
        worker = start_worker(db)
        try:
            await sessions.send(sid, "#call clock.now {}")

            async def waiting() -> bool:
                return bool(await Approvals(store).pending())

            await wait_until(waiting)
        finally:
            os.kill(worker.pid, signal.SIGKILL)
            worker.wait()
        [a] = await Approvals(store).pending()
        assert await results(store) == []
        await Approvals(store).approve(a["id"], by="bob")
        second = start_worker(db, "--until-idle")
        out, _ = second.communicate(timeout=120)
        assert "IDLE True" in out
        [res] = await results(store)
        assert not res["is_error"]
        replies = [m["text"] for m in (await sessions.get(sid))["messages"]
                   if m["role"] == "assistant"]
        assert len(replies) == 1 and replies[0].startswith("clock.now answered:")
    finally:
        await store.close()


async def paused(tmp_path: Path) -> tuple[Any, Sessions, str, dict[str, Any]]:
    store = await open_store(str(tmp_path / "db.sqlite"))
    sessions = Sessions(store)
    await spec(sessions, "clerk", **CONFIRM)
    sid = await sessions.create(agent="clerk")
    await sessions.send(sid, "#call clock.now {}")
    await run_idle(store, sid)
    [a] = await Approvals(store).pending()
    await Approvals(store).approve(a["id"], by="bob")
    return store, sessions, sid, a


async def test_an_intent_without_a_result_is_not_run_again(tmp_path: Path) -> None:
    store, _sessions, sid, a = await paused(tmp_path)
    try:
        ctx = a["context"]
        call = ToolCall(id=ctx["call_id"], name="clock.now", arguments="{}")
        # what a worker killed after committing the intent (mid-call) leaves behind
        await store.append([gate.intent_event(ctx["job"], sid, a["id"], call, "dead-worker")])
        r, _ = runner(store)
        try:
            assert await asyncio.wait_for(r.run_until_idle(30, {sid}), 60)
        finally:
            await r.aclose()
        [res] = await results(store)
        assert res["is_error"] and res["error_kind"] == "interrupted"
        assert "NOT run again" in res["content"]
        assert len(await event_types(store, "toolcall.intent")) == 1  # no second attempt
    finally:
        await store.close()


async def test_a_recorded_result_is_reused(tmp_path: Path) -> None:
    store, sessions, sid, a = await paused(tmp_path)
    try:
        ctx = a["context"]
        call = ToolCall(id=ctx["call_id"], name="clock.now", arguments="{}")
        # a worker killed after the call's result was committed, before its turn finished
        await store.append([
            gate.intent_event(ctx["job"], sid, a["id"], call, "dead-worker"),
            gate.done_event(ctx["job"], sid, a["id"], call,
                            ToolResult(content='{"iso": "recorded"}'), "dead-worker")])
        await run_idle(store, sid)
        [res] = await results(store)
        assert res["content"] == '{"iso": "recorded"}'
        assert len(await event_types(store, "toolcall.intent")) == 1
        replies = [m["text"] for m in (await sessions.get(sid))["messages"]
                   if m["role"] == "assistant"]
        assert replies == ['clock.now answered: {"iso": "recorded"}']
    finally:
        await store.close()
