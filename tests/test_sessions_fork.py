"""Going back in a session (issue 37): `history` lists its turns from the log, `fork` makes
a new session with its transcript up to the end of a turn. The copied part is history: no
tool call of it runs again (counted by the real stdio MCP server's own log), a fork of a
session waiting for approval does not wait, the origin is untouched, and a store with forks
verifies and rebuilds. Bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from clawtower.core.agents.config import config_from_data
from clawtower.core.approvals import Approvals
from clawtower.core.errors import Conflict, NotFound, ValidationError
from clawtower.core.sessions.service import Sessions
from clawtower.core.store import open_store
from clawtower.core.tools.registry import ToolRegistry
from tests.helpers.session_helpers import run_idle, runner, spec, texts

SALES = Path(__file__).resolve().parent / "helpers" / "sales_mcp_server.py"
CONFIRM = {"policy": {"tools": ["clock.now", "text.count"],
                      "approval": {"default": "auto", "tools": {"clock.*": "confirm"}}}}


async def turns(store: Any, sessions: Sessions, sid: str, messages: list[str],
                **kw: Any) -> None:
    for m in messages:
        await sessions.send(sid, m)
        await run_idle(store, sid, **kw)


async def session_events(store: Any, sid: str) -> list[dict[str, Any]]:
    return await store.fetchall("SELECT seq, type FROM events WHERE entity='session' AND"
                                " entity_id=? ORDER BY seq", (sid,))


async def test_fork_copies_the_transcript_to_the_turn_and_leaves_the_origin_alone(
        store: Any) -> None:
    sessions = Sessions(store)
    await spec(sessions, "clerk", policy={"tools": ["text.count"]})
    sid = await sessions.create(agent="clerk", by="alice")
    await turns(store, sessions, sid, ["hello", '#call text.count {"text": "a b c"}',
                                       "third"])
    h = await sessions.history(sid)
    assert [t["n"] for t in h["turns"]] == [1, 2, 3] and h["origin"] is None
    assert [t["message"] for t in h["turns"]] == ["hello", '#call text.count {"text":'
                                                  ' "a b c"}', "third"]
    assert [[c["name"] for c in t["tool_calls"]] for t in h["turns"]] == [
        [], ["text.count"], []]
    assert all(t["tokens"] > 0 and t["status"] == "done" for t in h["turns"])
    assert h["turns"][2]["reply"] == 'clerk: got it: "third"'
    before = await sessions.get(sid)
    origin_events = await session_events(store, sid)

    out = await sessions.fork(sid, 2, by="bob", reason="the third went wrong")
    new = out["session"]
    f = await sessions.get(new)
    assert texts(f) == texts(before)[:4]  # turns 1 and 2: two messages each
    assert f["origin"] == {**f["origin"], "session": sid, "turn": 2, "by": "bob",
                           "reason": "the third went wrong"}
    assert f["status"] == "idle" and f["jobs"] == [] and f["agent"] == "clerk"
    assert all(m["meta"]["fork"]["from"] == sid for m in f["messages"])
    # the origin is untouched: no event of it, the same transcript
    assert await session_events(store, sid) == origin_events
    assert texts(await sessions.get(sid)) == texts(before)

    # edit and retry: the fork's new turn sees the copied transcript, not turn 3
    out2 = await sessions.fork(sid, 2, message="a better third", by="bob")
    r, rec = runner(store)
    try:
        assert await r.run_until_idle(30, {out2["session"]})
    finally:
        await r.aclose()
    seen = [m.content for m in rec.requests[-1].messages]
    assert "a better third" in seen[-1] and "third" not in seen[1:-1]
    g = await sessions.history(out2["session"])
    assert [(t["n"], t["copied_from"]) for t in g["turns"]] == [(1, sid), (2, sid),
                                                               (3, None)]
    assert g["turns"][2]["message"] == "a better third"
    # a fork of the fork, at a copied turn, by another agent
    await spec(sessions, "other")
    out3 = await sessions.fork(out2["session"], 1, agent="other")
    f3 = await sessions.get(out3["session"])
    assert texts(f3) == texts(before)[:2] and f3["agent"] == "other"
    assert f3["origin"]["session"] == out2["session"]

    assert await store.verify_projections() == []
    await store.rebuild_projections()
    assert await store.verify_projections() == []
    assert texts(await sessions.get(out2["session"]))[-1] == (
        "assistant", 'clerk: got it: "a better third"')


async def test_no_tool_call_of_the_copied_part_runs_again(tmp_path: Path) -> None:
    """The sales MCP server (a real stdio server) logs each call it executes."""
    log = tmp_path / "calls.jsonl"
    cfg = config_from_data({"speed": 0, "mcp_servers": {"sales": {
        "command": sys.executable, "args": [str(SALES)], "env": {"SALES_MCP_CALLS": str(log)},
        "pin": "auto"}}}, "test")
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        sessions = Sessions(store)
        await spec(sessions, "desk", policy={"tools": ["sales.get_ticket"]})
        sid = await sessions.create(agent="desk")

        async def run(s: str) -> None:
            registry = ToolRegistry.from_project(store, cfg)
            r, _ = runner(store, cfg, registry=registry)
            try:
                assert await r.run_until_idle(60, {s}), r.errors
            finally:
                await r.aclose()
                await registry.aclose()

        for m in ['#call sales.get_ticket {"ticket_id": "T-1"}', "thanks",
                  '#call sales.get_ticket {"ticket_id": "T-2"}']:
            await sessions.send(sid, m)
            await run(sid)
        calls = [json.loads(x) for x in log.read_text().splitlines()]
        assert [c["args"]["ticket_id"] for c in calls] == ["T-1", "T-2"]

        plain = await sessions.fork(sid, 3)  # every call copied: none runs
        await run(plain["session"])
        edited = await sessions.fork(sid, 2, message="and the next one?")
        await run(edited["session"])
        retry = await sessions.fork(sid, 2, message='#call sales.get_ticket'
                                    ' {"ticket_id": "T-9"}')
        await run(retry["session"])
        calls = [json.loads(x) for x in log.read_text().splitlines()]
        assert [c["args"]["ticket_id"] for c in calls] == ["T-1", "T-2", "T-9"]
        h = await sessions.history(retry["session"])
        assert [[c["name"] for c in t["tool_calls"]] for t in h["turns"]] == [
            ["sales.get_ticket"], [], ["sales.get_ticket"]]
        assert h["turns"][0]["copied_from"] == sid and h["turns"][2]["copied_from"] is None
        assert await store.verify_projections() == []
    finally:
        await store.close()


async def test_a_fork_of_a_waiting_session_does_not_inherit_the_wait(tmp_path: Path) -> None:
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        sessions = Sessions(store)
        await spec(sessions, "clerk", **CONFIRM)
        sid = await sessions.create(agent="clerk")
        await turns(store, sessions, sid, ["first", '#call clock.now {"timezone": "UTC"}'])
        assert (await sessions.get(sid))["status"] == "waiting"
        [a] = await Approvals(store).pending()
        h = await sessions.history(sid)
        assert h["turns"][1]["status"] == "waiting" and h["turns"][1]["approval"] == a["id"]
        last = await store.last_seq()
        with pytest.raises(Conflict, match=f"turn 2 has not ended .it waits for approval"
                           f" {a['id']}"):
            await sessions.fork(sid, 2)
        assert await store.last_seq() == last  # nothing written

        out = await sessions.fork(sid, 1, message="something else")
        await run_idle(store, out["session"])
        f = await sessions.get(out["session"])
        assert f["status"] == "idle" and f["approvals"] == []
        assert [p["id"] for p in await Approvals(store).pending()] == [a["id"]]  # S-1's only
        assert texts(f)[-1] == ("assistant", 'clerk: got it: "something else"')
        assert (await sessions.get(sid))["status"] == "waiting"  # the origin still waits
        assert await store.verify_projections() == []
    finally:
        await store.close()


async def test_bad_input_names_what_and_why_and_writes_nothing(store: Any) -> None:
    sessions = Sessions(store)
    await spec(sessions, "clerk")
    sid = await sessions.create(agent="clerk")
    empty = await sessions.create(agent="clerk")
    owned = await sessions.create(agent="clerk", by="flow:F-1")
    await turns(store, sessions, sid, ["one"])
    last = await store.last_seq()
    cases: list[tuple[Any, type[Exception], str]] = [
        (sessions.fork(sid, 2), ValidationError, r"--at 2: out of range \(turns 1..1\)"),
        (sessions.fork(sid, 0), ValidationError, "out of range"),
        (sessions.fork("S-99", 1), NotFound, "S-99"),
        (sessions.fork(empty, 1), ValidationError, "no turns yet"),
        (sessions.fork(owned, 1), Conflict, "belongs to flow F-1.*flow rerun"),
        (sessions.fork(sid, 1, agent="nobody"), NotFound, "nobody"),
        (sessions.fork(sid, 1, message="  "), ValidationError, "empty"),
        (sessions.history("S-99"), NotFound, "S-99"),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            await call
    assert await store.last_seq() == last


async def test_cli_history_fork_and_show(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from clawtower.cli.main import main

    db = str(tmp_path / "c.db")
    store = await open_store(db)
    try:
        sessions = Sessions(store)
        await spec(sessions, "clerk")
        sid = await sessions.create(agent="clerk")
        await turns(store, sessions, sid, ["one", "two"])
    finally:
        await store.close()

    def cli(*argv: str) -> int:
        return main([*argv, "--db", db])

    capsys.readouterr()
    assert await asyncio.to_thread(cli, "session", "history", sid) == 0
    out = capsys.readouterr().out
    assert f"{sid}: 2 turn(s)" in out and "> two" in out and '< clerk: got it: "two"' in out
    assert await asyncio.to_thread(cli, "session", "history", sid, "--json") == 0
    h = json.loads(capsys.readouterr().out)
    assert [t["message"] for t in h["turns"]] == ["one", "two"]

    assert await asyncio.to_thread(cli, "session", "fork", sid, "--at", "1", "--message",
                                   "two, edited", "--reason", "retry") == 0
    captured = capsys.readouterr()
    new = captured.out.strip().splitlines()[-1]
    assert 'clerk: got it: "two, edited"' in captured.out
    assert f"{new}: forked from {sid} at turn 1" in captured.err
    assert await asyncio.to_thread(cli, "session", "show", new) == 0
    assert f"forked from {sid} at turn 1 by " in capsys.readouterr().out
    assert await asyncio.to_thread(cli, "session", "show", new, "--json") == 0
    assert json.loads(capsys.readouterr().out)["origin"]["turn"] == 1

    for argv, says in ((("session", "fork", sid, "--at", "7"), "out of range"),
                       (("session", "fork", "S-42", "--at", "1"), "S-42"),
                       (("session", "history", "S-42"), "S-42")):
        assert await asyncio.to_thread(cli, *argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and says in err, err
    assert await asyncio.to_thread(cli, "store", "verify") == 0
