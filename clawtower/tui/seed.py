"""A deterministic demo store for screenshots and console tests.

Same inputs, same store: a stepping fake clock stamps events, approval ids come from a seeded
generator, and tasks are driven one after another (no concurrency), through the public core
API and the simulated agents of examples/demo.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from clawtower.core import (
    AgentSet,
    FakeClock,
    MemorySink,
    NewEvent,
    Orchestrator,
    Role,
    SimScript,
    Tasks,
    TaskSpec,
    load_script,
    load_spec,
    open_store,
)
from clawtower.core.agents.simulator import AgentDef, Step
from clawtower.core.assets import asset
from clawtower.core.events import LeaseAcquired, Payload
from clawtower.core.meetings import events as mev
from clawtower.core.meetings.config import MeetingConfig
from clawtower.core.meetings.coordinator import Coordinator, lease_name
from clawtower.core.tasks import commands as _commands

EXAMPLES = asset("examples", "demo")
START = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


class SteppingClock(FakeClock):
    """A fake clock that moves `step` seconds every time it is read."""

    def __init__(self, start: float = START, step: float = 1.25) -> None:
        super().__init__(start)
        self.step = step

    def now(self) -> float:
        self.advance(self.step)
        return super().now()


@contextlib.contextmanager
def deterministic_ids(seed: int = 7) -> Iterator[None]:
    """Approval ids and idempotency keys from a seeded generator instead of `secrets`."""
    rng = random.Random(seed)
    namespace = vars(_commands)
    if "secrets" not in namespace:  # core changed how it draws ids: stay usable, if random
        yield
        return
    original = namespace["secrets"]
    namespace["secrets"] = SimpleNamespace(token_hex=lambda n=16: rng.randbytes(n).hex())
    try:
        yield
    finally:
        namespace["secrets"] = original


EXTRA_SPECS: list[dict[str, Any]] = [
    {"title": "Rotate the API signing keys",
     "goal": "Replace the signing keys of the public API before they expire on Friday.",
     "outputs": ["ops/keys/rotation-2027-01.md"],
     "acceptance_criteria": ["Tokens signed with the old key verify for 24 hours after rotation",
                             "The new public key is published at /.well-known/jwks.json"],
     "side_effects": [{"kind": "secret-rotation", "description": "Rotate the signing key pair",
                       "target": "vault://api/signing"}]},
    {"title": "Rate-limit the public search API",
     "goal": "Cap anonymous search at 10 requests per second per client.",
     "outputs": ["src/api/ratelimit.py", "tests/test_ratelimit.py"],
     "acceptance_criteria": ["The 11th request within a second gets HTTP 429 with Retry-After",
                             "Authenticated clients keep their current limits"]},
    {"title": "Verify the nightly backups",
     "goal": "Restore last night's backup into a scratch database and compare row counts.",
     "outputs": ["ops/backup-check.sh"],
     "acceptance_criteria": ["The check fails loudly when any table differs by one row or more"]},
]


async def seed_demo(db_path: str | Path, *, specs: Sequence[str | Path] | None = None,
                    extra: bool = True, script_path: str | Path | None = None,
                    seed: int = 7) -> dict[str, Any]:
    """Build the demo store at `db_path` (which should not exist yet). Returns a summary."""
    clock = SteppingClock()
    store = await open_store(db_path, clock=clock)
    try:
        script = load_script(script_path or EXAMPLES / "agents.yaml")
        script.speed = 0
        orch = Orchestrator(store, AgentSet.simulated(script), clock=clock, effects=MemorySink())
        tasks = Tasks(store)
        files = sorted(EXAMPLES.glob("specs/*.yaml")) if specs is None else [Path(s)
                                                                             for s in specs]
        ids: list[str] = []
        with deterministic_ids(seed):
            for f in files:
                source = f"examples/demo/specs/{f.name}"
                ids.append(await tasks.create(load_spec(f), source=source))
            for tid in ids:
                await orch.drive(tid)
            if extra:
                ids += await _seed_extra(tasks, orch)
        return {"tasks": ids, "seq": await store.last_seq()}
    finally:
        await store.close()


async def _seed_extra(tasks: Tasks, orch: Orchestrator) -> list[str]:
    """Tasks caught mid-flight, so the screenshots show live phases too."""
    rotate, ratelimit, backups = (TaskSpec.model_validate(s) for s in EXTRA_SPECS)
    ids = []
    tid = await tasks.create(rotate, source="console demo")
    await orch.drive(tid)  # ends awaiting an operator's approval
    ids.append(tid)
    tid = await tasks.create(ratelimit, source="console demo")
    await tasks.transition(tid, "spec_review", "spec complete: submitted for review")
    await tasks.review(tid, role=Role.SPEC_REVIEWER, reviewer="checker", verdict="approved")
    await tasks.transition(tid, "execution_ready", "spec review approved the spec")
    await tasks.transition(tid, "executing", "starting attempt 1", model="sim-standard",
                           escalation_model="sim-strong")
    await tasks.heartbeat(tid, 1, actor="builder", note="started")
    await tasks.checkpoint(tid, 1, {"step": 1, "of": 3}, actor="builder")
    ids.append(tid)
    tid = await tasks.create(backups, source="console demo")
    await tasks.transition(tid, "spec_review", "spec complete: submitted for review")
    ids.append(tid)
    return ids


# ---------------------------------------------------------------------------- meetings

MEETING_AGENTS = ("ada", "ben", "cyd")


def meeting_script(*, speed: float = 0.0, delay_ms: tuple[int, int] = (0, 0),
                   stances: dict[str, list[str]] | None = None, seed: int = 11) -> SimScript:
    """Three participants and a scribe; `stances` scripts each agent's marker per round."""
    agents = {n: AgentDef(role="participant") for n in MEETING_AGENTS}
    agents["scribe"] = AgentDef(role="summarizer")
    scripts = {name: {"meeting": [Step(stance=s) for s in seq]}
               for name, seq in (stances or {}).items()}
    return SimScript(seed=seed, speed=speed, delay_ms=delay_ms, agents=agents,
                     scripts=scripts)


async def seed_meetings(db_path: str | Path) -> list[str]:
    """Two finished meetings and one caught mid-round (fixed ids, a stepping clock)."""
    clock = SteppingClock(start=START + 3600, step=0.75)
    store = await open_store(db_path, clock=clock)
    try:
        script = meeting_script(stances={"ada": ["DISAGREE", "AGREE"],
                                         "ben": ["NEUTRAL", "AGREE"], "cyd": ["AGREE"]})
        team = AgentSet.simulated(script)
        await Coordinator(store, team).run(
            MeetingConfig(topic="Adopt the new cache layer?", participants=list(MEETING_AGENTS),
                          max_rounds=4, summary_tokens=60), meeting_id="mtg-cache")
        script = meeting_script(stances={"ada": ["AGREE"], "ben": ["DISAGREE"],
                                         "cyd": ["NEUTRAL", "AGREE", "DISAGREE"]})
        await Coordinator(store, AgentSet.simulated(script)).run(
            MeetingConfig(topic="Move the standup to 10:00?", participants=list(MEETING_AGENTS),
                          max_rounds=3, summary_tokens=60), meeting_id="mtg-standup")
        await _live_meeting(store)
        return ["mtg-cache", "mtg-standup", "mtg-ship-friday"]
    finally:
        await store.close()


async def _live_meeting(store: Any) -> None:
    """A meeting in round 2: ada has replied, ben timed out, cyd is still thinking."""
    mid = "mtg-ship-friday"

    def reply(rnd: int, agent: str, stance: str, text: str, status: str = "replied",
              why: str = "one marker on its own line") -> mev.ReplyRecorded:
        return mev.ReplyRecorded(round=rnd, agent=agent, status=status, raw=text, stance=stance,
                                 why=why, model="sim-standard", prompt_tokens=96 + rnd * 12,
                                 completion_tokens=len(text.split()))

    steps: list[Payload] = [
        mev.MeetingStarted(topic="Should we ship on Friday?", participants=list(MEETING_AGENTS),
                           summarizer="scribe", max_rounds=5, summary_tokens=80,
                           agent_timeout_s=60, meeting_timeout_s=600),
        mev.RoundStarted(round=1, summary_in_tokens=0),
        reply(1, "ada", "AGREE", "The release is green. [STANCE: AGREE]"),
        reply(1, "ben", "DISAGREE", "Nobody is on call at the weekend. [STANCE: DISAGREE]"),
        reply(1, "cyd", "NEUTRAL", "It depends on the rollback. [STANCE: NEUTRAL]"),
        mev.RoundEnded(round=1, consensus="NO", reason="1 of 3 agree, 1 disagree", agree=1,
                       disagree=1, neutral=1),
        mev.SummaryRecorded(round=1, text="Ada finds the release green; Ben objects that "
                            "nobody is on call at the weekend; Cyd wants a tested rollback.",
                            tokens=27, cap=80, prompt_tokens=140, completion_tokens=27),
        mev.RoundStarted(round=2, summary_in_tokens=27),
        reply(2, "ada", "AGREE", "Ben can hand over on-call to me. [STANCE: AGREE]"),
        reply(2, "ben", "NEUTRAL", "", status="timed_out",
              why="no reply within 60 s: counted as NEUTRAL"),
    ]

    # held by a process on another machine, for a long time: live, not orphaned
    owner = "demo-host:1:1#seed"
    held = NewEvent(entity_id=lease_name(mid), actor=owner, role=Role.SYSTEM.value,
                    payload=LeaseAcquired(owner=owner, expires_at=4.0e9))
    for i, payload in enumerate(steps):
        events = [NewEvent(entity_id=mid, actor="coordinator", role=Role.ORCHESTRATOR.value,
                           payload=payload)] + ([held] if i == 0 else [])

        def command(tx: Any, events: list[NewEvent] = events) -> None:
            for event in events:
                tx.emit(event)

        await store.execute(command)


WORKFLOWS = asset("examples", "workflows")


async def seed_workflows(db_path: str | Path) -> list[str]:
    """Three runs of examples/workflows: a release approved and finished, a review waiting
    for its JSON answer, a release waiting for approval (a stepping clock, seeded ids)."""
    from clawtower.core.workflows.service import Workflows

    clock = SteppingClock(start=START + 7200, step=0.5)
    store = await open_store(db_path, clock=clock)
    quiet = Workflows(store, actor="alice", stderr=lambda _text: None, cwd=str(WORKFLOWS))
    try:
        with deterministic_ids(11):
            first = await quiet.run("release.lobster", {"version": "1.3.2"})
            await quiet.decide(first["requiresApproval"]["approvalId"], True, by="bob")
            await quiet.run("review.lobster")
            await quiet.run("release.lobster")
        return [r["id"] for r in await quiet.list()]
    finally:
        await store.close()
