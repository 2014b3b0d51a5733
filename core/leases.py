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
             holder_gone: Callable[[str], bool] | None = None) -> bool:
    """`holder_gone(owner)`: True when the current holder is known dead (its process is gone
    from this host), so its lease may be taken over before it expires."""
    if not check_permission(tx, owner, role, Action.LEASE, name):
        return False
    row = tx.one("SELECT * FROM leases WHERE name=?", (name,))
    expires = tx.now + ttl
    if row is not None and row["owner"] == owner and not row["released"] \
            and row["expires_at"] > tx.now:
        tx.emit(NewEvent(entity_id=name, actor=owner, role=role.value,
                         payload=ev.LeaseRenewed(owner=owner, expires_at=expires)))
        return True
    if row is None or row["released"] or row["expires_at"] <= tx.now or (
            holder_gone is not None and holder_gone(str(row["owner"]))):
        prev = row["owner"] if row is not None and not row["released"] else None
        tx.emit(NewEvent(entity_id=name, actor=owner, role=role.value,
                         payload=ev.LeaseAcquired(owner=owner, expires_at=expires,
                                                  took_over_from=prev)))
        return True
    return False


def _release(tx: WriteTx, name: str, owner: str, role: Role = Role.SYSTEM) -> None:
    if not check_permission(tx, owner, role, Action.LEASE, name):
        return
    row = tx.one("SELECT * FROM leases WHERE name=?", (name,))
    if row is not None and row["owner"] == owner and not row["released"]:
        tx.emit(NewEvent(entity_id=name, actor=owner, role=role.value,
                         payload=ev.LeaseReleased(owner=owner)))


async def acquire(store: Store, name: str, owner: str, ttl: float,
                  role: Role = Role.SYSTEM) -> bool:
    """Take or renew `name` for `owner`; False if another live owner holds it."""
    return await store.execute(lambda tx: _acquire(tx, name, owner, ttl, role))


async def release(store: Store, name: str, owner: str, role: Role = Role.SYSTEM) -> None:
    await store.execute(lambda tx: _release(tx, name, owner, role))
