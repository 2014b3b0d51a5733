"""What the multi-process fault tests check about leases, from the log alone (issue 39).

A holder that stalls past its lease's expiry (a live process on a loaded machine) may lose
the lease, and taking it over then is correct: the stalled holder's late writes are fenced.
What must never happen is a take-over of a lease that was still live and whose holder was
not known dead. So the invariant is stated per take-over, not per owner:

- every `lease.acquired` that took over from a previous holder committed at or after that
  lease's last expiry (`lease.acquired`/`lease.renewed` carry it; an event's `ts` is the
  commit's clock, the same one the taking command compared the expiry with), or
- the previous holder is one the test killed, and the take-over committed after the kill
  (a process known gone from this host may be taken over before its lease expires).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TakeOver:
    lease: str
    by: str
    prev: str
    seq: int
    at: float  # the commit's clock
    prev_expiry: float | None  # the previous holder's last expiry, if the log has it


def take_overs(evs: Iterable[Any]) -> list[TakeOver]:
    """Every take-over of an unreleased lease, with the expiry it took over from."""
    expiry: dict[str, float] = {}
    out: list[TakeOver] = []
    for e in evs:
        if e.type in ("lease.acquired", "lease.renewed"):
            prev = getattr(e.payload, "took_over_from", None)
            if e.type == "lease.acquired" and prev is not None:
                out.append(TakeOver(e.entity_id, e.payload.owner, prev, e.seq, e.ts,
                                    expiry.get(e.entity_id)))
            expiry[e.entity_id] = e.payload.expires_at
        elif e.type == "lease.released":
            expiry.pop(e.entity_id, None)
    return out


def early(takes: Sequence[TakeOver], killed: Collection[str], killed_at: float) -> list[TakeOver]:
    """The take-overs that broke the invariant: a live lease taken from a holder not known
    dead (empty when the leases behaved)."""
    bad = []
    for t in takes:
        if t.prev_expiry is not None and t.at >= t.prev_expiry:
            continue  # the lease had lapsed: a stalled holder's, or a dead one's
        if t.prev in killed and t.at >= killed_at:
            continue  # its holder was killed: known gone, taken before the expiry
        bad.append(t)
    return bad
