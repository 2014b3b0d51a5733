"""The meeting coordinator (mediator pattern: agents never talk to each other).

Each round every participant gets the question and the rolling summary, concurrently, and
answers with reasoning and one stance marker. The coordinator parses each stance itself
(stance.py), records the raw reply, the stance and why, decides consensus (consensus.py) and
either ends the meeting or has the summarizer compress the previous summary plus this round
into at most `summary_tokens` tokens. Everything goes into the store as meeting.* events.

Each meeting is held by the process running it through a lease (`meeting:<id>`, renewed
while it runs). A meeting whose process died (kill -9, a power cut) shows as orphaned once
that lease lapses or the process is seen gone; `adopt` continues it in another process from
its last recorded step: finished rounds are never asked again, and replies already recorded
in an unfinished round are kept (only the agents that had not answered are asked).

Timeouts: a participant that does not answer within `agent_timeout_s` counts as NEUTRAL for
that round (status timed_out, noted in `why`); the whole meeting stops after
`meeting_timeout_s`. Summaries are capped with `count_tokens` (the tokenizer the simulator's
usage figures use); the summarizer is also asked for at most that many tokens.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .. import leases
from ..agents.completion import complete
from ..agents.provider import ChatMessage, ChatRequest, ProviderError
from ..agents.registry import AgentSet
from ..agents.simulator import AgentDef
from ..agents.tokens import count_tokens, truncate_tokens
from ..errors import Conflict, NotFound, StorageFault, ValidationError
from ..events import NewEvent, Payload
from ..liveness import holder_gone, process_tag
from ..store.interface import Store, WriteTx
from ..tasks.commands import record_usage
from ..tasks.permissions import Role
from . import events as mev
from .config import MeetingConfig, MeetingOutcome, validate
from .consensus import Consensus, decide
from .stance import Stance, parse_stance

ACTOR = "coordinator"
LEASE_TTL_S = 10.0
_MEETING_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ROLE = Role.ORCHESTRATOR.value

PARTICIPANT_PROMPT = (
    "You are {agent}, one participant in a meeting run by a coordinator. Think about the "
    "question on your own, give your reasoning briefly, then end with exactly one line that "
    "holds only your stance marker: [STANCE: AGREE], [STANCE: DISAGREE] or [STANCE: NEUTRAL]. "
    "Only a marker on its own line, outside quotes and code, counts."
)
SUMMARIZER_PROMPT = (
    "You keep the minutes of a meeting. Compress the previous summary and this round's "
    "replies into at most {cap} tokens: positions, arguments, open points. Plain prose."
)


class _Reply(BaseModel):
    agent: str
    status: str
    raw: str
    stance: Stance
    why: str


def lease_name(meeting_id: str) -> str:
    return f"meeting:{meeting_id}"


@dataclass
class _Progress:
    """Where a meeting stands in the store: what an adopting process continues from."""

    rounds: int = 0  # rounds finished (their summary recorded)
    summary: str = ""
    last_consensus: Consensus = Consensus.NO
    last_detail: str = ""
    stances: dict[str, Stance] = field(default_factory=dict)
    # the unfinished round after them, if it had started: who had answered, whether it ended
    partial_started: bool = False
    partial_replies: dict[str, _Reply] = field(default_factory=dict)
    partial_ended: bool = False


# meeting tasks cancelled because another process adopted their meeting (they write nothing)
_ADOPTED_AWAY: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()


class Coordinator:
    def __init__(
        self,
        store: Store,
        agents: AgentSet,
        *,
        tokens: Callable[[str], int] = count_tokens,
        monotonic: Callable[[], float] = time.monotonic,
        lease_ttl_s: float = LEASE_TTL_S,
    ) -> None:
        self.store = store
        self.agents = agents
        self.tokens = tokens
        self.monotonic = monotonic
        self.lease_ttl_s = lease_ttl_s
        self.owner = f"{process_tag()}#{uuid.uuid4().hex[:6]}"

    async def _emit(self, meeting_id: str, *payloads: Payload | NewEvent) -> None:
        events = [
            p if isinstance(p, NewEvent)
            else NewEvent(entity_id=meeting_id, actor=ACTOR, role=ROLE, payload=p)
            for p in payloads
        ]

        def command(tx: WriteTx) -> None:
            for event in events:
                tx.emit(event)

        await self.store.execute(command)

    async def run(
        self,
        config: MeetingConfig,
        *,
        meeting_id: str | None = None,
        minutes_dir: str | Path | None = None,
    ) -> MeetingOutcome:
        mid = await self.open(config, meeting_id=meeting_id)
        return await self.proceed(mid, config, minutes_dir=minutes_dir)

    async def open(self, config: MeetingConfig, *, meeting_id: str | None = None) -> str:
        """Validate and record meeting.started; return the meeting id."""
        participants, summarizer = validate(config, self.agents)
        mid = meeting_id or f"mtg-{uuid.uuid4().hex[:12]}"
        if not _MEETING_ID.fullmatch(mid):
            raise ValidationError(f"meeting: invalid id {mid!r} (letters, digits, . _ -)")
        started = mev.MeetingStarted(
            topic=config.topic.strip(), participants=participants, summarizer=summarizer,
            max_rounds=config.max_rounds, summary_tokens=config.summary_tokens,
            agent_timeout_s=config.agent_timeout_s, meeting_timeout_s=config.meeting_timeout_s,
        )

        def command(tx: WriteTx) -> None:  # the meeting and its lease in one commit
            tx.emit(NewEvent(entity_id=mid, actor=ACTOR, role=ROLE, payload=started))
            leases.acquire_in(tx, lease_name(mid), self.owner, self.lease_ttl_s)

        await self.store.execute(command)
        return mid

    async def adopt(self, mid: str, *, minutes_dir: str | Path | None = None
                    ) -> MeetingOutcome:
        """Continue a meeting whose process died, here, from its last recorded step.

        Raises NotFound, Conflict (it has ended, or a live process still holds it) or
        ValidationError (its agents are not in this process's agents file)."""

        def claim(tx: WriteTx) -> tuple[dict[str, Any], float]:
            row = tx.one("SELECT * FROM meetings WHERE id=?", (mid,))
            if row is None:
                raise NotFound(f"meeting {mid!r}: no such meeting")
            if row["status"] == "ended":
                raise Conflict(f"meeting {mid!r}: already ended ({row['end_reason']})")
            held = leases.holder(tx, lease_name(mid))
            if not leases._acquire(tx, lease_name(mid), self.owner, self.lease_ttl_s,
                                   holder_gone=holder_gone):
                owner = str(held["owner"]) if held else "another process"
                raise Conflict(f"meeting {mid!r}: still run by {owner.partition('#')[0]};"
                               " it is not orphaned (stop it with `meeting stop`)")
            return dict(row), tx.now

        row, now = await self.store.execute(claim)
        try:
            config = MeetingConfig(
                topic=row["topic"], participants=json.loads(row["participants"]),
                max_rounds=int(row["max_rounds"]), summary_tokens=int(row["summary_tokens"]),
                agent_timeout_s=float(row["agent_timeout_s"]),
                meeting_timeout_s=float(row["meeting_timeout_s"]),
                summarizer=row["summarizer"])
            validate(config, self.agents)
            progress = await self._progress(mid)
        except BaseException:
            await leases.release(self.store, lease_name(mid), self.owner)
            raise
        left = config.meeting_timeout_s - (now - float(row["started_at"]))
        config = config.model_copy(update={"meeting_timeout_s": max(left, 0.001)})
        return await self.proceed(mid, config, minutes_dir=minutes_dir, progress=progress)

    async def _progress(self, mid: str) -> _Progress:
        rounds, replies, summaries = await self.store.fetch_many([
            ("SELECT * FROM meeting_rounds WHERE meeting_id=? ORDER BY round", (mid,)),
            ("SELECT * FROM meeting_replies WHERE meeting_id=? ORDER BY round, seq", (mid,)),
            ("SELECT round, text FROM meeting_summaries WHERE meeting_id=? ORDER BY round",
             (mid,)),
        ])
        done = {int(s["round"]): str(s["text"]) for s in summaries}
        p = _Progress()
        for rnd in rounds:
            n = int(rnd["round"])
            got = {str(r["agent"]): _Reply(agent=r["agent"], status=r["status"], raw=r["raw"],
                                           stance=Stance(r["stance"]), why=r["why"])
                   for r in replies if int(r["round"]) == n}
            if n in done:
                p.rounds, p.summary = n, done[n]
                p.last_consensus = Consensus(rnd["consensus"] or Consensus.NO.value)
                p.last_detail = str(rnd["reason"] or "")
                p.stances = {a: r.stance for a, r in got.items()}
            elif n == p.rounds + 1:
                p.partial_started, p.partial_replies = True, got
                p.partial_ended = rnd["consensus"] is not None
        return p

    async def proceed(
        self, mid: str, config: MeetingConfig, *, minutes_dir: str | Path | None = None,
        progress: _Progress | None = None,
    ) -> MeetingOutcome:
        """Run the rounds of an opened meeting until consensus, max rounds, timeout or stop.

        Before each round the meeting row is read from the store, so a stop or a grant of
        more rounds from another process is honoured between rounds; a round under way when
        a stop arrives is finished (its replies and summary recorded) and the meeting then
        ends with reason "stopped".
        """
        participants, summarizer = validate(config, self.agents)
        topic = config.topic.strip()
        p = progress or _Progress()
        summary = p.summary
        transcript: list[str] = []  # history="full": every reply so far, verbatim
        rounds = p.rounds
        result, reason, detail = p.last_consensus, "max_rounds", p.last_detail
        stances: dict[str, Stance] = dict(p.stances)
        max_rounds = config.max_rounds
        renewer = asyncio.create_task(self._renew(mid, asyncio.current_task()))
        try:
            async with asyncio.timeout(config.meeting_timeout_s):
                while result is Consensus.NO or not rounds:  # an adopted meeting may be done
                    row = await self.store.fetchone(
                        "SELECT max_rounds, stop_requested, stop_by, stop_reason FROM meetings"
                        " WHERE id=?", (mid,))
                    if row is not None:
                        max_rounds = int(row["max_rounds"])
                        if row["stop_requested"]:
                            reason, result = "stopped", Consensus.NO
                            why = f": {row['stop_reason']}" if row["stop_reason"] else ""
                            detail = f"stopped by {row['stop_by']} after {rounds} round(s){why}"
                            break
                    if rounds >= max_rounds:
                        detail = f"no consensus after {max_rounds} rounds: {detail}"
                        break
                    rnd = rounds = rounds + 1
                    context = summary if config.history == "rolling" else "\n\n".join(transcript)
                    resumed = rnd == p.rounds + 1 and p.partial_started
                    if not resumed:
                        await self._emit(mid, mev.RoundStarted(
                            round=rnd, summary_in_tokens=self.tokens(context)))
                    kept = p.partial_replies if resumed else {}
                    asked = await asyncio.gather(*(
                        self._ask(mid, topic, config, agent, rnd, context, max_rounds)
                        for agent in participants if agent not in kept))
                    got = {r.agent: r for r in asked} | kept
                    replies = [got[agent] for agent in participants]
                    stances = {r.agent: r.stance for r in replies}
                    decision = decide([r.stance for r in replies])
                    if not (resumed and p.partial_ended):
                        await self._emit(mid, mev.RoundEnded(
                            round=rnd, consensus=decision.consensus.value,
                            reason=decision.reason, agree=decision.agree,
                            disagree=decision.disagree, neutral=decision.neutral))
                    result, detail = decision.consensus, decision.reason
                    if config.history == "full":
                        transcript += [f"ROUND {rnd}, {r.agent}:\n{r.raw or '(' + r.status + ')'}"
                                       for r in replies]
                    summary = await self._summarise(mid, topic, config, summarizer, rnd,
                                                    summary, replies)
                    if decision.consensus is not Consensus.NO:
                        break
            if result is not Consensus.NO:
                reason = "consensus"
        except TimeoutError:
            reason = "timeout"
            result = Consensus.NO
            detail = f"meeting timeout after {config.meeting_timeout_s:g} s in round {rounds}"
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task in _ADOPTED_AWAY:
                raise  # another process adopted it: not this one's to end
            # the process running it is stopping (ctrl+c, a console quitting): record how the
            # meeting ended, so it is not left "running" for ever, then let the cancel go on
            await asyncio.shield(self._end(mid, mev.MeetingEnded(
                result=Consensus.NO.value, reason="stopped", rounds=rounds,
                detail=f"interrupted in round {rounds}: the process running it stopped",
                stances={k: v.value for k, v in stances.items()})))
            raise
        finally:
            renewer.cancel()
        await self._end(mid, mev.MeetingEnded(
            result=result.value, reason=reason, rounds=rounds, detail=detail,
            stances={k: v.value for k, v in stances.items()}))
        if minutes_dir is not None:
            from .minutes import write_minutes

            path = await write_minutes(self.store, mid, minutes_dir)
            await self._emit(mid, mev.MinutesWritten(path=str(path)))
        return MeetingOutcome(meeting_id=mid, result=result, reason=reason, rounds=rounds,
                              detail=detail, stances=stances)

    async def _end(self, mid: str, ended: mev.MeetingEnded) -> None:
        """The end of the meeting and the release of its lease, in one commit."""

        def command(tx: WriteTx) -> None:
            tx.emit(NewEvent(entity_id=mid, actor=ACTOR, role=ROLE, payload=ended))
            leases.release_in(tx, lease_name(mid), self.owner)

        await self.store.execute(command)

    async def _renew(self, mid: str, driver: asyncio.Task[Any] | None) -> None:
        """Keep the meeting's lease while running it; losing it (another process adopted the
        meeting after this one stalled past the TTL) stops this one without a write."""
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            try:
                ok = await self.store.execute(lambda tx: leases._acquire(
                    tx, lease_name(mid), self.owner, self.lease_ttl_s))
            except StorageFault:
                continue  # the storage failed, not the meeting: renew at the next turn
            if not ok:
                if driver is not None:
                    _ADOPTED_AWAY.add(driver)
                    driver.cancel()
                return

    def _agent(self, name: str) -> AgentDef:
        return self.agents.agents[name]

    async def _ask(
        self, mid: str, topic: str, config: MeetingConfig, agent: str, rnd: int, summary: str,
        max_rounds: int,
    ) -> _Reply:
        definition = self._agent(agent)
        user = (
            f"QUESTION: {topic}\n\nROUND {rnd} of at most {max_rounds}.\n\n"
            f"{'SUMMARY SO FAR' if config.history == 'rolling' else 'TRANSCRIPT SO FAR'}:\n"
            f"{summary or '(none: this is the first round)'}\n\n"
            "Give your reasoning and your stance."
        )
        request = ChatRequest(
            model=definition.model,
            messages=[ChatMessage(role="system", content=PARTICIPANT_PROMPT.format(agent=agent)),
                      ChatMessage(role="user", content=user)],
            max_tokens=definition.max_output_tokens, timeout_s=config.agent_timeout_s,
            metadata={"purpose": "meeting", "labels": [agent], "agent": agent, "meeting": mid,
                      "topic": topic, "round": rnd - 1},
        )
        started = self.monotonic()
        prompt_tokens = completion_tokens = 0
        estimated = False
        raw = ""
        try:
            async with asyncio.timeout(config.agent_timeout_s):
                result = await complete(self.agents.provider(definition), request)
            raw = result.text
            estimated = not (result.usage.prompt_tokens and result.usage.completion_tokens)
            prompt_tokens = result.usage.prompt_tokens or sum(
                self.tokens(m.content) for m in request.messages)
            completion_tokens = result.usage.completion_tokens or self.tokens(raw)
            parsed = parse_stance(raw)
            reply = _Reply(agent=agent, status="replied", raw=raw, stance=parsed.stance,
                           why=parsed.reason)
        except TimeoutError:
            reply = _Reply(agent=agent, status="timed_out", raw="", stance=Stance.NEUTRAL,
                           why=f"no reply within {config.agent_timeout_s:g} s: counted as"
                               " NEUTRAL")
        except ProviderError as exc:
            reply = _Reply(agent=agent, status="error", raw="", stance=Stance.UNKNOWN,
                           why=f"provider failed ({exc}): counted as NEUTRAL")
        elapsed = round(self.monotonic() - started, 3)
        recorded = mev.ReplyRecorded(
            round=rnd, agent=agent, status=reply.status, raw=reply.raw,
            stance=reply.stance.value, why=reply.why, model=definition.model,
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            elapsed_s=elapsed)
        await self._record(mid, recorded, agent, definition.model, "meeting",
                           prompt_tokens, completion_tokens, estimated)
        return reply

    async def _record(self, mid: str, payload: Payload, agent: str, model: str, purpose: str,
                      prompt_tokens: int, completion_tokens: int, estimated: bool = False
                      ) -> None:
        """Emit `payload` and, when the call used tokens, the per-agent usage row (subject:
        the meeting id), in one transaction."""

        def command(tx: WriteTx) -> None:
            tx.emit(NewEvent(entity_id=mid, actor=ACTOR, role=ROLE, payload=payload))
            if prompt_tokens or completion_tokens:
                record_usage(tx, mid, agent, model, purpose, prompt_tokens, completion_tokens,
                             estimated=estimated)

        await self.store.execute(command)

    async def _summarise(
        self, mid: str, topic: str, config: MeetingConfig, summarizer: str, rnd: int,
        previous: str, replies: Sequence[_Reply],
    ) -> str:
        cap = config.summary_tokens
        tally = [f"- {r.agent} [{r.stance.value}]: {_first_line(r) }" for r in replies]
        user = (
            f"QUESTION: {topic}\nPREVIOUS SUMMARY:\n{previous or '(none)'}\n"
            f"THIS ROUND:\n" + "\n".join(tally)
            + "\n\nFULL REPLIES:\n"
            + "\n\n".join(f"{r.agent}:\n{r.raw or '(no reply: ' + r.status + ')'}"
                          for r in replies)
        )
        definition = self._agent(summarizer)
        request = ChatRequest(
            model=definition.model,
            messages=[ChatMessage(role="system", content=SUMMARIZER_PROMPT.format(cap=cap)),
                      ChatMessage(role="user", content=user)],
            max_tokens=cap, timeout_s=config.agent_timeout_s,
            metadata={"purpose": "meeting_summary", "labels": [summarizer],
                      "agent": summarizer, "meeting": mid, "topic": topic, "round": rnd - 1},
        )
        note = ""
        prompt_tokens = completion_tokens = 0
        try:
            async with asyncio.timeout(config.agent_timeout_s):
                result = await complete(self.agents.provider(definition), request)
            text = result.text.strip()
            prompt_tokens = result.usage.prompt_tokens
            completion_tokens = result.usage.completion_tokens
        except (TimeoutError, ProviderError) as exc:
            what = "timed out" if isinstance(exc, TimeoutError) else f"failed ({exc})"
            note = f"summarizer {what}: kept the round's tally and the previous summary"
            text = " ".join(t[2:] for t in tally) + (f" Earlier: {previous}" if previous else "")
        truncated = self.tokens(text) > cap
        if truncated:
            text = truncate_tokens(text, cap)
            while self.tokens(text) > cap:  # a different tokenizer than count_tokens
                text = text[: max(0, len(text) - 8)]
        await self._record(mid, mev.SummaryRecorded(
            round=rnd, text=text, tokens=self.tokens(text), cap=cap, truncated=truncated,
            note=note, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens),
            summarizer, definition.model, "meeting_summary", prompt_tokens, completion_tokens)
        return text


def _first_line(reply: _Reply, limit: int = 24) -> str:
    if reply.status != "replied":
        return f"({reply.why})"
    for line in reply.raw.splitlines():
        if line.strip() and parse_stance(line).stance is Stance.UNKNOWN:
            return truncate_tokens(line.strip(), limit)
    return "(stance only)"
