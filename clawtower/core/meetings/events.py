"""The meeting events: everything a meeting does is in the log, so it can be watched from
another process and replayed. Entity "meeting", entity id the meeting id.

Rounds are numbered from 1. Replies are recorded by the coordinator (actor "coordinator",
role orchestrator): an agent's text is data, its stance is what the parser made of it.
"""

from __future__ import annotations

from pydantic import Field

from ..events import Payload


class MeetingStarted(Payload):
    TYPE = "meeting.started"
    ENTITY = "meeting"
    topic: str
    participants: list[str]
    summarizer: str
    max_rounds: int
    summary_tokens: int
    agent_timeout_s: float
    meeting_timeout_s: float


class RoundStarted(Payload):
    TYPE = "meeting.round_started"
    ENTITY = "meeting"
    round: int
    summary_in_tokens: int = 0  # tokens of the rolling summary every agent is given


class ReplyRecorded(Payload):
    TYPE = "meeting.reply_recorded"
    ENTITY = "meeting"
    round: int
    agent: str
    status: str  # replied | timed_out | error
    raw: str  # the reply exactly as received ("" on timeout or error)
    stance: str  # AGREE | DISAGREE | NEUTRAL | UNKNOWN
    why: str  # the parser's reason, or the timeout/error note
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    elapsed_s: float = 0.0


class RoundEnded(Payload):
    TYPE = "meeting.round_ended"
    ENTITY = "meeting"
    round: int
    consensus: str  # FULL | MAJORITY | NO
    reason: str
    agree: int
    disagree: int
    neutral: int


class SummaryRecorded(Payload):
    TYPE = "meeting.summary_recorded"
    ENTITY = "meeting"
    round: int
    text: str
    tokens: int  # counted with the tokenizer the cap is enforced with
    cap: int
    truncated: bool = False
    note: str = ""  # e.g. the summarizer failed and a plain tally was kept instead
    prompt_tokens: int = 0
    completion_tokens: int = 0


class MeetingEnded(Payload):
    TYPE = "meeting.ended"
    ENTITY = "meeting"
    result: str  # FULL | MAJORITY | NO
    reason: str  # consensus | max_rounds | timeout | stopped | error
    rounds: int
    detail: str = ""
    stances: dict[str, str] = Field(default_factory=dict)  # the last round's stances


class MinutesWritten(Payload):
    TYPE = "meeting.minutes_written"
    ENTITY = "meeting"
    path: str


class StopRequested(Payload):
    """An operator asked the meeting to stop. The coordinator reads it (from the store, so it
    may come from another process) before each round and ends the meeting with reason
    "stopped"; a round already under way is finished first."""

    TYPE = "meeting.stop_requested"
    ENTITY = "meeting"
    by: str
    reason: str = ""


class RoundsGranted(Payload):
    """An operator granted more rounds: max_rounds becomes `max_rounds`."""

    TYPE = "meeting.rounds_granted"
    ENTITY = "meeting"
    by: str
    n: int
    max_rounds: int
