"""The web console's sessions and refused tokens, in the store (tui/web.py is the caller).

A session cookie is 32 random bytes (URL-safe); the store holds its SHA-256 only. Each
request with a cookie is one indexed read (`lookup`); a sign-in, a sign-out and a refused
token are one write each. Every `console --web` process on a store sees the same sessions
and the same failure window, and a restart keeps both.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from ..events import NewEvent
from ..store.interface import Store, WriteTx
from ..tasks.permissions import Role
from ..triggers.ratelimit import FailureLimiter
from . import events as cev
from .projections import SCOPE

ACTOR = "console-web"
LOGIN_ENTITY = "console:login"


@dataclass(frozen=True)
class Session:
    operator: str
    token_sha256: str
    expires: float
    sid_sha256: str = ""  # "" for a Bearer request (nothing stored)


def sid_hash(sid: str) -> str:
    return hashlib.sha256(sid.encode("utf-8", "surrogatepass")).hexdigest()


def _event(entity: str, payload: cev.ConsoleAuthFailed | cev.ConsoleSignedIn
           | cev.ConsoleSignedOut) -> NewEvent:
    return NewEvent(entity_id=entity, actor=ACTOR, role=Role.SYSTEM.value, payload=payload)


async def throttled(store: Store, limiter: FailureLimiter, address: str) -> int | None:
    """Seconds until `address` may try a token again, or None."""
    return await limiter.retry_after(store, SCOPE, address)


async def refused(store: Store, limiter: FailureLimiter, address: str, reason: str
                  ) -> str | None:
    """Count one refused token; "address"/"scope" when it started a throttle episode."""
    def write(tx: WriteTx) -> str | None:
        tripped = limiter.fail(tx, SCOPE, address)
        tx.emit(_event(LOGIN_ENTITY, cev.ConsoleAuthFailed(
            address=address, reason=reason, window_s=limiter.window_s)))
        return tripped
    return await store.execute(write)


async def sign_in(store: Store, operator: str, token_sha256: str, ttl_s: float, via: str
                  ) -> tuple[str, Session]:
    """A new session: (the cookie value, to give the browser and forget; the session)."""
    sid = secrets.token_urlsafe(32)
    h = sid_hash(sid)
    expires = store.clock.now() + ttl_s
    await store.append([_event(f"console-session:{h[:16]}", cev.ConsoleSignedIn(
        sid_sha256=h, operator=operator, token_sha256=token_sha256, expires_at=expires,
        via=via))])
    return sid, Session(operator, token_sha256, expires, h)


async def lookup(store: Store, sid: str) -> Session | None:
    """The live session of cookie value `sid` (unexpired), or None."""
    h = sid_hash(sid)
    row = await store.fetchone(
        "SELECT operator, token_sha256, expires_at FROM console_sessions WHERE sid_sha256=?"
        " AND expires_at>?", (h, store.clock.now()))
    if row is None:
        return None
    return Session(str(row["operator"]), str(row["token_sha256"]), float(row["expires_at"]),
                   h)


async def sign_out(store: Store, session: Session, reason: str) -> None:
    await store.append([_event(f"console-session:{session.sid_sha256[:16]}",
                               cev.ConsoleSignedOut(sid_sha256=session.sid_sha256,
                                                    operator=session.operator,
                                                    reason=reason))])
