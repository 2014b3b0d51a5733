"""Leases: how several processes attached to one store avoid running the same work.

A lease is held by one owner until it expires; the holder renews it; a dead holder's lease
expires and another process takes over. Every change is an event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import events as ev
from .events import NewEvent
from .store.interface import Store, WriteTx
from .tasks.commands import check_permission
from .tasks.permissions import Action, Role


def holder(tx: WriteTx, name: str) -> dict[str, Any] | None:
    """The live (unreleased, unexpired) holder's row, or None."""
    row = tx.one("SELECT * FROM leases WHERE name=?", (name,))
    if row is None or row["released"] or row["expires_at"] <= tx.now:
        return None
    return row


def _acquire(tx: WriteTx, name: str, owner: str, ttl: float, role: Role = Role.SYSTEM,
             holder_gone: Callable[[str], bool] | None = None,
             into: list[NewEvent] | None = None) -> bool:
    """`holder_gone(owner)`: True when the current holder is known dead (its process is gone
    from this host), so its lease may be taken over before it expires. `into`: the event is
    appended there instead of emitted (the caller folds it into its own, issue 24.2)."""
    emit = tx.emit if into is None else into.append
    if not check_permission(tx, owner, role, Action.LEASE, name):
        return False
    row = tx.one("SELECT * FROM leases WHERE name=?", (name,))
    expires = tx.now + ttl
    if row is not None and row["owner"] == owner and not row["released"] \
            and row["expires_at"] > tx.now:
        emit(NewEvent(entity_id=name, actor=owner, role=role.value,
                      payload=ev.LeaseRenewed(owner=owner, expires_at=expires)))
        return True
    if row is None or row["released"] or row["expires_at"] <= tx.now or (
            holder_gone is not None and holder_gone(str(row["owner"]))):
        prev = row["owner"] if row is not None and not row["released"] else None
        emit(NewEvent(entity_id=name, actor=owner, role=role.value,
                      payload=ev.LeaseAcquired(owner=owner, expires_at=expires,
                                               took_over_from=prev)))
        return True
    return False


def _release(tx: WriteTx, name: str, owner: str, role: Role = Role.SYSTEM,
             into: list[NewEvent] | None = None) -> None:
    if not check_permission(tx, owner, role, Action.LEASE, name):
        return
    row = tx.one("SELECT * FROM leases WHERE name=?", (name,))
    if row is not None and row["owner"] == owner and not row["released"]:
        (tx.emit if into is None else into.append)(NewEvent(
            entity_id=name, actor=owner, role=role.value, payload=ev.LeaseReleased(owner=owner)))


def acquire_in(tx: WriteTx, name: str, owner: str, ttl: float,
               role: Role = Role.SYSTEM) -> bool:
    """`acquire` inside a command of one's own (the lease and what it guards in one commit)."""
    return _acquire(tx, name, owner, ttl, role)


def release_in(tx: WriteTx, name: str, owner: str, role: Role = Role.SYSTEM) -> None:
    _release(tx, name, owner, role)


async def acquire(store: Store, name: str, owner: str, ttl: float,
                  role: Role = Role.SYSTEM) -> bool:
    """Take or renew `name` for `owner`; False if another live owner holds it."""
    return await store.execute(lambda tx: _acquire(tx, name, owner, ttl, role))


async def release(store: Store, name: str, owner: str, role: Role = Role.SYSTEM) -> None:
    await store.execute(lambda tx: _release(tx, name, owner, role))


def claim_many(tx: WriteTx, names: list[str], owner: str, ttl: float, limit: int) -> list[str]:
    """Take up to `limit` of `names` that no other live owner holds (one commit for a whole
    sweep of work items); returns the names taken, in order."""
    taken: list[str] = []
    for name in names:
        if len(taken) >= limit:
            break
        row = holder(tx, name)
        if row is not None and row["owner"] != owner:
            continue
        if _acquire(tx, name, owner, ttl):
            taken.append(name)
    return taken


def renew_many(tx: WriteTx, names: list[str], owner: str, ttl: float) -> list[str]:
    """Renew each of `names` still held by `owner`; returns the ones lost (expired and taken
    by someone else meanwhile, or released)."""
    lost = []
    for name in names:
        row = holder(tx, name)
        if row is not None and row["owner"] != owner:
            lost.append(name)
            continue
        if row is None:  # expired while we stalled: take it back only if nobody did
            prev = tx.one("SELECT owner, released FROM leases WHERE name=?", (name,))
            if prev is None or prev["owner"] != owner or prev["released"]:
                lost.append(name)
                continue
        if not _acquire(tx, name, owner, ttl):
            lost.append(name)
    return lost


def release_many(tx: WriteTx, names: list[str], owner: str) -> None:
    for name in names:
        _release(tx, name, owner)
