"""The meetings API for the fronts: list/get, stop and grant (also from another process),
start_meeting, usage rows, the full-history option."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clawtower.core import Meetings, start_meeting
from clawtower.core.agents.registry import AgentSet
from clawtower.core.agents.simulator import AgentDef, SimScript, Step
from clawtower.core.errors import Conflict, NotFound, ValidationError
from clawtower.core.meetings.config import MeetingConfig
from clawtower.core.store import open_store

NAMES = ["alice", "bob", "carol"]


def team(scripts: dict[str, list[Step]], *, speed: float = 0.0,
         delay_ms: tuple[int, int] = (0, 0)) -> AgentSet:
    defs = {n: AgentDef(role="participant") for n in NAMES}
    defs["scribe"] = AgentDef(role="summarizer")
    return AgentSet.simulated(SimScript(seed=1, speed=speed, delay_ms=delay_ms, agents=defs,
                                        scripts={n: {"meeting": s} for n, s in scripts.items()}))


def st(*stances: str) -> list[Step]:
    return [Step(stance=s) for s in stances]  # type: ignore[arg-type]


NEVER = {"alice": st("AGREE"), "bob": st("DISAGREE"), "carol": st("NEUTRAL")}


async def test_list_and_get(store, tmp_path: Path) -> None:
    agents = team({"alice": st("DISAGREE", "AGREE"), "bob": st("AGREE"), "carol": st("AGREE")})
    mid, task = await start_meeting(store, agents, MeetingConfig(topic="Cache?",
                                    participants=NAMES), minutes_dir=tmp_path)
    out = await task
    assert out.meeting_id == mid and out.rounds == 2
    meetings = Meetings(store)
    [row] = await meetings.list()
    assert (row["id"], row["status"], row["result"], row["reason"], row["rounds"],
            row["participants"]) == (mid, "ended", "FULL", "consensus", 2, NAMES)
    m = await meetings.get(mid)
    assert m["minutes_path"] == str(tmp_path / f"{mid}.md")
    assert [r["round"] for r in m["rounds"]] == [1, 2]
    r1 = m["rounds"][0]
    assert (r1["consensus"], r1["agree"], r1["disagree"]) == ("NO", 2, 1)
    assert r1["prompt_tokens"] > 0 and r1["summary"] and r1["summary_tokens"] > 0
    assert {x["agent"]: x["status"] for x in r1["replies"]} == dict.fromkeys(NAMES, "replied")
    assert m["summary"] == m["rounds"][1]["summary"]
    with pytest.raises(NotFound, match="nope"):
        await meetings.get("nope")


async def test_usage_rows_per_agent(store) -> None:
    mid, task = await start_meeting(store, team(NEVER), MeetingConfig(
        topic="t", participants=NAMES, max_rounds=2))
    await task
    rows = await store.fetchall("SELECT * FROM usage WHERE subject=? ORDER BY agent", (mid,))
    assert [r["agent"] for r in rows] == [*NAMES, "scribe"]
    assert all(r["calls"] == 2 and r["prompt_tokens"] > 0 for r in rows)
    assert await store.verify_projections() == []


async def test_stop_from_another_process_ends_after_the_round(store, store_target) -> None:
    agents = team(NEVER, speed=1.0, delay_ms=(100, 100))
    mid, task = await start_meeting(store, agents, MeetingConfig(
        topic="t", participants=NAMES, max_rounds=50))
    other = await open_store(store_target)
    try:
        await Meetings(other).request_stop(mid, by="op", reason="enough")
        out = await task
        assert out.reason == "stopped" and out.rounds <= 1
        assert "stopped by op" in out.detail and "enough" in out.detail
        with pytest.raises(Conflict, match="already ended"):
            await Meetings(other).request_stop(mid, by="op")
        with pytest.raises(Conflict, match="already ended"):
            await Meetings(other).grant_rounds(mid, 2, by="op")
    finally:
        await other.close()
    m = await Meetings(store).get(mid)
    assert m["status"] == "ended" and m["reason"] == "stopped" and m["stop_requested"]


async def test_grant_rounds_extends_a_running_meeting(store) -> None:
    agents = team(NEVER, speed=1.0, delay_ms=(50, 50))
    mid, task = await start_meeting(store, agents, MeetingConfig(
        topic="t", participants=NAMES, max_rounds=1))
    assert await Meetings(store).grant_rounds(mid, 2, by="op") == 3
    out = await task
    assert (out.reason, out.rounds) == ("max_rounds", 3)
    assert (await Meetings(store).get(mid))["max_rounds"] == 3
    assert await store.verify_projections() == []


async def test_grant_validation(store) -> None:
    with pytest.raises(ValidationError, match="at least 1"):
        await Meetings(store).grant_rounds("x", 0, by="op")
    with pytest.raises(NotFound, match="x"):
        await Meetings(store).grant_rounds("x", 1, by="op")
    with pytest.raises(NotFound, match="x"):
        await Meetings(store).request_stop("x", by="op")


async def test_start_meeting_validates_before_writing(store) -> None:
    with pytest.raises(ValidationError, match="unknown agent zed"):
        await start_meeting(store, team({}), MeetingConfig(topic="t",
                                                           participants=["alice", "zed"]))
    assert await store.last_seq() == 0


async def test_timeout_status_and_thinking(store) -> None:
    agents = team({"alice": st("AGREE"), "bob": st("AGREE"),
                   "carol": [Step(stance="AGREE", delay_ms=30_000)]}, speed=1.0)
    mid, task = await start_meeting(store, agents, MeetingConfig(
        topic="t", participants=NAMES, agent_timeout_s=0.5, max_rounds=1))
    for _ in range(100):  # while carol thinks, the round shows two replies
        m = await Meetings(store).get(mid)
        if m["rounds"] and len(m["rounds"][-1]["replies"]) == 2:
            break
        await asyncio.sleep(0.02)
    assert m["status"] == "running"
    assert {r["agent"] for r in m["rounds"][-1]["replies"]} == {"alice", "bob"}
    await task
    m = await Meetings(store).get(mid)
    assert {r["agent"]: r["status"] for r in m["rounds"][0]["replies"]}["carol"] == "timeout"


async def test_full_history_grows_the_prompt(store) -> None:
    prompts = {}
    for history in ("rolling", "full"):
        mid, task = await start_meeting(store, team(NEVER), MeetingConfig(
            topic="t", participants=NAMES, max_rounds=4, summary_tokens=40,
            history=history))  # type: ignore[arg-type]
        await task
        m = await Meetings(store).get(mid)
        prompts[history] = [r["prompt_tokens"] for r in m["rounds"]]
    assert prompts["full"][3] > 1.7 * prompts["full"][1]
    assert prompts["rolling"][3] < 1.5 * prompts["rolling"][1]


async def test_every_meeting_event_has_wording(store) -> None:
    from clawtower.core.describe import event_summary
    from clawtower.core.events import StoredEvent

    mid, task = await start_meeting(store, team({"alice": st("AGREE"), "bob": st("AGREE"),
                                                 "carol": [Step(stance="AGREE",
                                                                delay_ms=30_000)]},
                                                speed=1.0),
                                    MeetingConfig(topic="Cache?", participants=NAMES,
                                                  agent_timeout_s=1.0, max_rounds=1))
    # The stop must land inside round 1: requested earlier, the meeting may end before it.
    async with asyncio.timeout(10):
        while not any(e.type == "meeting.round_started"
                      for e in await store.events_after(0, 1000, entity_id=mid)):
            await asyncio.sleep(0.01)
    await Meetings(store).grant_rounds(mid, 1, by="op")
    await Meetings(store).request_stop(mid, by="op", reason="enough")
    await task
    events: list[StoredEvent] = await store.events_after(0, 1000, entity_id=mid)
    lines = {e.type: event_summary(e) for e in events}
    assert lines["meeting.started"].startswith("meeting started: Cache? with alice, bob, carol")
    assert lines["meeting.rounds_granted"] == "1 more round(s) granted by op (now at most 2)"
    assert lines["meeting.stop_requested"] == "stop requested by op: enough"
    assert lines["meeting.round_started"].startswith("round 1 started")
    assert lines["meeting.round_ended"].startswith("round 1: MAJORITY consensus (2 agree")
    assert lines["meeting.summary_recorded"].startswith("round 1 summary: ")
    assert lines["meeting.ended"].startswith("meeting ended after 1 round(s): MAJORITY")
    carol = [event_summary(e) for e in events if e.type == "meeting.reply_recorded"
             and e.payload.model_dump()["agent"] == "carol"]
    assert carol[0].startswith("round 1: carol NEUTRAL (timed out)")
    assert not any(line.startswith("{") for line in lines.values())
