"""A meeting whose process died: shown orphaned, continued elsewhere from its last recorded
step (no round asked twice, no reply recorded twice), or stopped at once."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from clawtower.core.agents.registry import AgentSet
from clawtower.core.agents.simulator import AgentDef, SimScript, Step
from clawtower.core.errors import Conflict, NotFound
from clawtower.core.meetings import coordinator as coord
from clawtower.core.meetings.config import MeetingConfig
from clawtower.core.meetings.consensus import Consensus
from clawtower.core.meetings.coordinator import Coordinator, lease_name
from clawtower.core.meetings.service import Meetings

NAMES = ["alice", "bob", "carol"]


def team(scripts: dict[str, list[Step]]) -> AgentSet:
    defs = {n: AgentDef(role="participant") for n in NAMES} | {
        "scribe": AgentDef(role="summarizer")}
    script = SimScript(seed=5, speed=1.0, delay_ms=(0, 0), agents=defs,
                       scripts={n: {"meeting": steps} for n, steps in scripts.items()})
    return AgentSet.simulated(script)


def s(stance: str, ms: int = 0) -> Step:
    return Step(stance=stance, delay_ms=ms)  # type: ignore[arg-type]


# round 1: no consensus; round 2: alice answers at once, bob and carol take 5 s (the process
# "dies" while they think); round 3: everyone agrees
SCRIPTS = {"alice": [s("AGREE"), s("DISAGREE"), s("AGREE")],
           "bob": [s("DISAGREE"), s("AGREE", 5000), s("AGREE")],
           "carol": [s("NEUTRAL"), s("AGREE", 5000), s("AGREE")]}


async def _die_in_round_two(store, ttl: float) -> str:
    """Run a meeting until alice's round-2 reply is recorded, then stop its task the way a
    kill -9 does: no further write, its lease left to lapse."""
    first = Coordinator(store, team(SCRIPTS), lease_ttl_s=ttl)
    config = MeetingConfig(topic="Ship it?", participants=NAMES, max_rounds=5)
    mid = await first.open(config, meeting_id="m1")
    task = asyncio.create_task(first.proceed(mid, config))
    for _ in range(500):
        row = await store.fetchone("SELECT 1 FROM meeting_replies WHERE meeting_id='m1'"
                                   " AND round=2 AND agent='alice'")
        if row is not None:
            break
        await asyncio.sleep(0.01)
    else:
        pytest.fail("alice's round-2 reply never came")
    coord._ADOPTED_AWAY.add(task)  # cancelled without ending the meeting: a dead process
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return mid


async def _replies(store) -> Counter[tuple[int, str]]:
    rows = await store.fetchall("SELECT round, agent FROM meeting_replies WHERE meeting_id='m1'")
    return Counter((int(r["round"]), str(r["agent"])) for r in rows)


async def test_an_orphaned_meeting_is_adopted_from_its_unfinished_round(store, clock) -> None:
    mid = await _die_in_round_two(store, ttl=0.3)
    meetings = Meetings(store)
    assert (await meetings.get(mid))["orphaned"] is False  # its lease has not lapsed yet
    clock.advance(0.4)  # the dead process's lease lapses
    listed = await meetings.list()
    assert [(m["id"], m["status"], m["orphaned"]) for m in listed] == [("m1", "running", True)]

    # round 2 goes on here: alice is not asked again; bob and carol answer quickly this time
    again = {"alice": [s("AGREE")], "bob": [s("AGREE"), s("AGREE")],
             "carol": [s("AGREE"), s("AGREE")]}
    out = await meetings.adopt(team(again), mid)
    assert (out.result, out.reason, out.rounds) == (Consensus.FULL, "consensus", 3)

    types = Counter(e.type for e in await store.events_after(0, 10_000, entity_id=mid))
    assert types["meeting.round_started"] == 3 and types["meeting.round_ended"] == 3
    assert types["meeting.summary_recorded"] == 3 and types["meeting.ended"] == 1
    assert set((await _replies(store)).values()) == {1} and len(await _replies(store)) == 9
    r2 = await store.fetchall("SELECT agent, stance FROM meeting_replies WHERE"
                              " meeting_id='m1' AND round=2 ORDER BY agent")
    assert [(r["agent"], r["stance"]) for r in r2] == [
        ("alice", "DISAGREE"), ("bob", "AGREE"), ("carol", "AGREE")]  # alice's kept
    took = [e for e in await store.events_after(0, 10_000, entity_id=lease_name(mid))
            if e.type == "lease.acquired"]
    assert len(took) == 2 and took[1].payload.model_dump()["took_over_from"]
    assert (await meetings.get(mid))["orphaned"] is False
    assert await store.verify_projections() == []


async def test_a_live_meeting_cannot_be_adopted(store) -> None:
    await _die_in_round_two(store, ttl=60)  # its lease is still good for a minute
    with pytest.raises(Conflict, match=r"'m1': still run by .* it is not orphaned"):
        await Meetings(store).adopt(team(SCRIPTS), "m1")
    with pytest.raises(NotFound, match="'nope': no such meeting"):
        await Meetings(store).adopt(team(SCRIPTS), "nope")


async def test_stopping_an_orphaned_meeting_ends_it_at_once(store, clock) -> None:
    mid = await _die_in_round_two(store, ttl=0.2)
    clock.advance(0.3)
    meetings = Meetings(store)
    assert await meetings.request_stop(mid, by="ops", reason="stale") is True
    m = await meetings.get(mid)
    assert (m["status"], m["reason"], m["orphaned"]) == ("ended", "stopped", False)
    assert "stopped by ops after 1 round(s)" in m["detail"] and "stale" in m["detail"]
    with pytest.raises(Conflict, match="already ended"):
        await meetings.adopt(team(SCRIPTS), mid)


async def test_a_meeting_that_ended_in_consensus_before_its_end_was_recorded(store, clock
                                                                            ) -> None:
    """The process died after the deciding round's summary, before meeting.ended: adopting
    it records the end and asks nobody anything."""
    agree = {n: [s("AGREE")] for n in NAMES}
    first = Coordinator(store, team(agree), lease_ttl_s=0.2)
    reached = asyncio.Event()

    async def dies_before_recording_the_end(mid: str, ended: object) -> None:
        reached.set()
        await asyncio.Event().wait()  # the kill lands here

    first._end = dies_before_recording_the_end  # type: ignore[method-assign,assignment]
    config = MeetingConfig(topic="Ship it?", participants=NAMES)
    mid = await first.open(config, meeting_id="m1")
    task = asyncio.create_task(first.proceed(mid, config))
    await asyncio.wait_for(reached.wait(), 30)
    coord._ADOPTED_AWAY.add(task)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await Meetings(store).get(mid))["status"] == "running"
    clock.advance(0.3)
    out = await Meetings(store).adopt(team({}), mid)  # nobody has anything scripted left
    assert (out.result, out.reason, out.rounds) == (Consensus.FULL, "consensus", 1)
    assert len(await _replies(store)) == 3
    types = Counter(e.type for e in await store.events_after(0, 10_000, entity_id=mid))
    assert types["meeting.round_started"] == 1 and types["meeting.ended"] == 1


async def test_an_engine_adopts_an_orphaned_meeting_on_its_own(store, clock) -> None:
    """Issue 22 (loose end): engines adopt orphaned meetings as they adopt runs, with no
    command: the meeting goes on from its unfinished round and ends once."""
    from clawtower.core.engine import Engine

    mid = await _die_in_round_two(store, ttl=0.3)
    clock.advance(0.4)  # the dead process's lease lapses
    again = {"alice": [s("AGREE")], "bob": [s("AGREE"), s("AGREE")],
             "carol": [s("AGREE"), s("AGREE")]}
    engine = Engine(store, team(again), clock=clock, lease_ttl_s=5.0)
    runner = asyncio.create_task(engine.run())
    try:
        for _ in range(1000):
            m = await Meetings(store).get(mid)
            if m["status"] == "ended":
                break
            await asyncio.sleep(0.01)
        assert (m["status"], m["result"], m["reason"]) == ("ended", "FULL", "consensus"), m
    finally:
        engine.stop()
        await asyncio.wait_for(runner, 30)
    assert list(engine.adoption_errors) == []
    assert set((await _replies(store)).values()) == {1} and len(await _replies(store)) == 9
    ended = [e for e in await store.events_after(0, 10_000, entity_id=mid)
             if e.type == "meeting.ended"]
    assert len(ended) == 1
    assert await store.verify_projections() == []
