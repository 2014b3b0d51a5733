"""`clawtower store repair` (issue 34): a store that a release before the writer's check
(storable.py) left with values no reader can use, made whole again by one recorded event.

What such a release wrote: an import's `expires_at` of NaN or ±Infinity was logged as
`null` (pydantic's encoding) but projected live as the number itself, so `store verify`
found live rows a replay does not give (for good: the events are permanent); 1e308 was
logged and projected alike, and `memory show` died on it with an OverflowError.

The repair never rewrites the log. It records one `store.repaired` event naming each
unusable value (the event that set it, the field, what it was, what replaces it); the
event's projection handlers replace the values, live now and at the same place in every
replay, so `store verify` compares equal again. Differences it does not cover (a live row
of some other table that a replay does not give) are then healed as `store rebuild` heals
them, from the log, and the event lists what verify said before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .interface import Store


@dataclass
class Repair:
    """What `repair` found and did."""

    seq: int | None = None  # the store.repaired event, None when there was nothing to do
    values: list[Any] = field(default_factory=list)  # core.events.RepairedValue
    differences: list[str] = field(default_factory=list)  # store verify's, before
    rebuilt: int | None = None  # events replayed by a rebuild, when one was needed
    remaining: list[str] = field(default_factory=list)  # store verify's, after


async def repair(store: Store, *, by: str, reason: str = "store repair") -> Repair:
    """Find the unusable values, record one `store.repaired` event replacing them (none
    when there is nothing to repair), rebuild the projections if verify still differs."""
    from ..events import NewEvent, StoreRepaired
    from .projections import find_repairs

    out = Repair(differences=await store.verify_projections())

    def command(tx: Any) -> int | None:  # the finders read the writer's own connection
        out.values = find_repairs(tx.conn)
        if not out.values and not out.differences:
            return None
        return tx.emit(NewEvent(  # type: ignore[no-any-return]
            entity_id="store", actor=by, role="operator", payload=StoreRepaired(
                reason=reason, values=out.values, differences=out.differences))).seq

    out.seq = await store.execute(command)
    if out.seq is None:
        return out
    out.remaining = await store.verify_projections()
    if out.remaining:
        out.rebuilt = await store.rebuild_projections()
        out.remaining = await store.verify_projections()
    return out


__all__ = ["Repair", "repair"]
