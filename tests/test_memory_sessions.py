"""Agent memory in sessions (issue 25 items 3 and 5): the memory tools under the allow-list
and approval tiers, namespaces a spec's policy names, automatic recall as an ephemeral
system-prompt block (never a stored message), and the acceptance scenario: what agent A
was told in one session it recalls in another, agent B (not allowed) never."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clawtower.core.memory.service import Memories
from clawtower.core.sessions.service import Sessions
from clawtower.core.store import open_store
from tests.helpers.session_helpers import event_types, runner, spec

MEM_TOOLS = ["memory_forget", "memory_recall", "memory_store"]
FACT = {"key": "cat", "content": "The user's cat is called Miso", "category": "user"}
BLOCK = "# Recalled memories"


async def _turn(store: Any, sid: str) -> Any:
    r, rec = runner(store)
    try:
        assert await r.run_until_idle(30, {sid})
    finally:
        await r.aclose()
    return rec


@pytest.mark.both_backends  # SQLite, and PostgreSQL (recall reads its local replica)
async def test_a_fact_told_in_one_session_is_recalled_in_another_and_not_by_b(
        store_target: str) -> None:
    store = await open_store(store_target)
    try:
        sessions = Sessions(store)
        await spec(sessions, "alpha", policy={"tools": MEM_TOOLS})
        # beta asks to recall alpha's namespace, but its policy.memory does not name it
        await spec(sessions, "beta", policy={"tools": MEM_TOOLS},
                   context_policy={"recall": {"namespaces": ["agent:alpha"]}})
        s1 = await sessions.create(agent="alpha")
        await sessions.send(s1, f"#call memory_store {json.dumps(FACT)}")
        rec = await _turn(store, s1)
        assert rec.tools_seen(0) == MEM_TOOLS
        [res] = await event_types(store, "turn.tool_result")
        assert not res["payload"]["is_error"], res["payload"]["content"]
        [stored] = await event_types(store, "memory.stored")  # one event for the write
        assert stored["actor"] == "alpha" and stored["entity_id"] == "agent:alpha/cat"
        job = await store.fetchone("SELECT turn_id FROM turn_jobs WHERE session_id=?", (s1,))
        assert job is not None
        assert stored["payload"]["source_session"] == s1
        assert stored["payload"]["source_turn"] == job["turn_id"]

        s2 = await sessions.create(agent="alpha")
        await sessions.send(s2, "what is my cat called?")
        rec = await _turn(store, s2)
        system = rec.requests[-1].messages[0].content
        assert BLOCK in system and "(agent:alpha) cat [user]: The user's cat is called Miso" \
            in system

        # the turn records what it recalled (namespace, key, score; never the content)
        job2 = (await sessions.get(s2))["jobs"][-1]
        [ref] = job2["recalled"]
        assert (ref["namespace"], ref["key"]) == ("agent:alpha", "cat") and ref["score"] >= 0
        assert set(ref) == {"namespace", "key", "score"}
        from clawtower.cli.session import _detail

        assert f"  {job2['turn_id']}: agent:alpha cat (" in _detail(await sessions.get(s2))

        s3 = await sessions.create(agent="beta")
        await sessions.send(s3, "what is my cat called?")
        rec = await _turn(store, s3)
        assert BLOCK not in rec.requests[-1].messages[0].content
        assert (await sessions.get(s3))["jobs"][-1]["recalled"] == []
        # and beta's tool call into alpha's namespace is a policy result, nothing read
        await sessions.send(s3, '#call memory_recall {"query": "cat",'
                                ' "namespace": "agent:alpha"}')
        rec = await _turn(store, s3)
        res = (await event_types(store, "turn.tool_result"))[-1]["payload"]
        assert res["is_error"] and res["error_kind"] == "policy"
        assert "may not use memory namespace 'agent:alpha'" in res["content"]
        assert "Miso" not in res["content"]

        # the recalled block was context for the turn only: no stored message holds it
        rows = await store.fetchall("SELECT text FROM session_messages")
        assert rows and not any(BLOCK in r["text"] for r in rows)
        logged = await store.fetchall("SELECT payload FROM events")
        assert not any(BLOCK in r["payload"] for r in logged)  # in no event at all
        assert await store.verify_projections() == []
    finally:
        await store.close()


async def test_memory_tools_follow_the_allow_list_tiers_and_namespace_policy(
        tmp_path: Path) -> None:
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        sessions = Sessions(store)
        await spec(sessions, "plain", policy={"tools": ["clock.now"]})
        await spec(sessions, "careful", policy={
            "tools": MEM_TOOLS, "approval": {"default": "auto",
                                            "tools": {"memory_store": "confirm"}}})
        await spec(sessions, "sharer", policy={"tools": MEM_TOOLS,
                                               "memory": ["shared:*"]})
        sid = await sessions.create(agent="plain")
        await sessions.send(sid, f"#call memory_store {json.dumps(FACT)}")
        rec = await _turn(store, sid)
        assert "memory_store" not in rec.tools_seen(0)
        res = (await event_types(store, "turn.tool_result"))[-1]["payload"]
        assert res["is_error"] and res["error_kind"] == "policy"

        sid = await sessions.create(agent="careful")
        await sessions.send(sid, f"#call memory_store {json.dumps(FACT)}")
        await _turn(store, sid)
        job = await store.fetchone("SELECT status FROM turn_jobs WHERE session_id=?", (sid,))
        assert job is not None and job["status"] == "waiting"  # the confirm tier holds it

        sid = await sessions.create(agent="sharer")
        await sessions.send(sid, '#call memory_store {"key": "k", "content": "shared fact",'
                                 ' "namespace": "shared:team"}')
        await _turn(store, sid)
        await sessions.send(sid, '#call memory_store {"key": "k", "content": "mine"}')
        await _turn(store, sid)  # its own agent: namespace is not in its policy.memory
        results = [e["payload"] for e in await event_types(store, "turn.tool_result")][-2:]
        assert not results[0]["is_error"]
        assert results[1]["error_kind"] == "policy"
        assert [r["key"] for r in await Memories(store).listing()] == ["k"]
        assert await event_types(store, "memory.stored") != []
    finally:
        await store.close()


async def test_recall_policy_top_k_and_disabled(tmp_path: Path) -> None:
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        sessions = Sessions(store)
        mem = Memories(store)
        for i in range(6):
            await mem.put("agent:few", f"k{i}", f"deploy note {i}", by="t")
            await mem.put("agent:off", f"k{i}", f"deploy note {i}", by="t")
        await spec(sessions, "few", context_policy={"recall": {"top_k": 2}})
        await spec(sessions, "off", context_policy={"recall": {"enabled": False}})
        sid = await sessions.create(agent="few")
        await sessions.send(sid, "deploy")
        system = (await _turn(store, sid)).requests[-1].messages[0].content
        assert system.count("- (agent:few) ") == 2
        sid = await sessions.create(agent="off")
        await sessions.send(sid, "deploy")
        assert BLOCK not in (await _turn(store, sid)).requests[-1].messages[0].content
    finally:
        await store.close()


async def test_an_approved_confirm_tier_store_runs_once(tmp_path: Path) -> None:
    from clawtower.core.approvals import Approvals

    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        sessions = Sessions(store)
        await spec(sessions, "careful", policy={
            "tools": MEM_TOOLS, "approval": {"default": "confirm"}})
        sid = await sessions.create(agent="careful")
        await sessions.send(sid, f"#call memory_store {json.dumps(FACT)}")
        await _turn(store, sid)
        assert await event_types(store, "memory.stored") == []  # waits for a human
        [a] = await Approvals(store).pending()
        assert a["context"]["tool"] == "memory_store"
        await Approvals(store).approve(a["id"], by="bob", reason="fine")
        await _turn(store, sid)
        [stored] = await event_types(store, "memory.stored")
        assert stored["actor"] == "careful" and stored["payload"]["source_session"] == sid
        assert len(await event_types(store, "toolcall.done")) == 1
    finally:
        await store.close()


async def test_a_subagent_inherits_no_memories(tmp_path: Path) -> None:
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        sessions = Sessions(store)
        await Memories(store).put("agent:parent", "secret", "the launch code is 0000",
                                  by="t")
        await spec(sessions, "parent", policy={"tools": ["spawn_subagent"]})
        await spec(sessions, "child")
        sid = await sessions.create(agent="parent")
        await sessions.send(sid, "#spawn 1 child about the launch code")
        r, rec = runner(store)
        try:
            assert await r.run_until_idle(30)
        finally:
            await r.aclose()
        systems: dict[str, list[str]] = {}
        for q in rec.requests:
            systems.setdefault(str(q.metadata.get("agent")), []).append(q.messages[0].content)
        assert "the launch code is 0000" in systems["parent"][0]
        assert systems["child"] and not any(BLOCK in s for s in systems["child"])
    finally:
        await store.close()
