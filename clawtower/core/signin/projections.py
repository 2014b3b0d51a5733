"""Projections of the console sign-in events (tables of schema v20). Pure functions of the
event and earlier rows: expired sessions go when a later sign-in is projected (as of its
time), the oldest beyond MAX_SESSIONS too, so the table stays bounded."""

from __future__ import annotations

import sqlite3

from ..events import StoredEvent
from ..store.projections import projects
from ..triggers.ratelimit import count_failure
from . import events as cev

MAX_SESSIONS = 10_000  # signed-in browsers remembered; the oldest forgotten first
SCOPE = "console"  # the limiters' scope of console sign-ins


@projects(cev.ConsoleAuthFailed)
def _auth_failed(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, cev.ConsoleAuthFailed)
    count_failure(db, e, SCOPE, p.address, p.window_s)


@projects(cev.ConsoleSignedIn)
def _signed_in(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, cev.ConsoleSignedIn)
    db.execute("DELETE FROM console_sessions WHERE expires_at<=?", (e.ts,))
    db.execute("INSERT INTO console_sessions (sid_sha256, operator, token_sha256,"
               " signed_in_at, expires_at, seq) VALUES (?, ?, ?, ?, ?, ?)",
               (p.sid_sha256, p.operator, p.token_sha256, e.ts, p.expires_at, e.seq))
    db.execute("DELETE FROM console_sessions WHERE seq<=(SELECT seq FROM console_sessions"
               " ORDER BY seq DESC LIMIT 1 OFFSET ?)", (MAX_SESSIONS,))


@projects(cev.ConsoleSignedOut)
def _signed_out(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, cev.ConsoleSignedOut)
    db.execute("DELETE FROM console_sessions WHERE sid_sha256=?", (p.sid_sha256,))
