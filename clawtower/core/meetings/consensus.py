"""Consensus rules over the parsed stances of one round.

FULL: every agent AGREEs. MAJORITY: at least two thirds AGREE and nobody DISAGREEs.
NO: anything else (the meeting goes on). UNKNOWN (missing or invalid marker, timeout)
counts as NEUTRAL: it never blocks a majority and never counts as agreement.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from .stance import Stance

MIN_AGENTS = 2


class Consensus(StrEnum):
    FULL = "FULL"
    MAJORITY = "MAJORITY"
    NO = "NO"


class ConsensusResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    consensus: Consensus
    agree: int
    disagree: int
    neutral: int  # NEUTRAL and UNKNOWN together
    unknown: int  # of which UNKNOWN
    total: int
    reason: str


def decide(stances: Sequence[Stance]) -> ConsensusResult:
    """The consensus of one round. Fewer than two stances is a caller error."""
    total = len(stances)
    if total < MIN_AGENTS:
        raise ValueError(f"a meeting needs at least {MIN_AGENTS} agents, got {total}")
    agree = sum(1 for s in stances if s is Stance.AGREE)
    disagree = sum(1 for s in stances if s is Stance.DISAGREE)
    unknown = sum(1 for s in stances if s is Stance.UNKNOWN)
    neutral = total - agree - disagree
    counts = f"{agree} agree, {disagree} disagree, {neutral} neutral ({unknown} unknown) of {total}"
    if agree == total:
        kind, why = Consensus.FULL, "all agree"
    elif disagree == 0 and 3 * agree >= 2 * total:
        kind, why = Consensus.MAJORITY, "at least 2/3 agree and nobody disagrees"
    elif disagree:
        kind, why = Consensus.NO, "someone disagrees"
    else:
        kind, why = Consensus.NO, "fewer than 2/3 agree"
    return ConsensusResult(
        consensus=kind,
        agree=agree,
        disagree=disagree,
        neutral=neutral,
        unknown=unknown,
        total=total,
        reason=f"{why}: {counts}",
    )
