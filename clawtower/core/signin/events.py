"""Web console sign-in events (entity "console"; tui/web.py writes them through
core/signin/sessions.py). The session cookie itself is never in an event: only its SHA-256,
so the log (or a copy of the store) signs nobody in."""

from __future__ import annotations

from ..events import Payload


class ConsoleAuthFailed(Payload):
    """A console token refused (entity id `console:login`): counted in the limiters' shared
    window (`auth_failures`, scope "console"); `reason` never holds the token."""

    TYPE = "console.auth_failed"
    ENTITY = "console"
    address: str
    reason: str
    window_s: float


class ConsoleSignedIn(Payload):
    """A browser exchanged `operator`'s token for a session cookie whose SHA-256 is
    `sid_sha256`; `token_sha256` is the token's (a rotated token ends its sessions)."""

    TYPE = "console.signed_in"
    ENTITY = "console"
    sid_sha256: str
    operator: str
    token_sha256: str
    expires_at: float
    via: str  # link | form


class ConsoleSignedOut(Payload):
    """The session ended before its expiry: its token was rotated (or the session was
    refused for another reason, in `reason`)."""

    TYPE = "console.signed_out"
    ENTITY = "console"
    sid_sha256: str
    operator: str
    reason: str
