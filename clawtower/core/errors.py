"""Errors of the public API. Each maps to a CLI exit code and a one-line message.

Usage/validation errors (exit 2) name the file, field or id at fault; runtime faults exit 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ClawError(Exception):
    """Base of every error clawtower raises on purpose."""

    exit_code = 1


class ValidationError(ClawError):
    """Bad input: a malformed file, a missing field, an unknown value."""

    exit_code = 2


class NotFound(ValidationError):
    """An id that names nothing in the store."""


class PermissionDenied(ValidationError):
    """A role tried an action the permissions matrix does not grant. Recorded as an event."""


class IllegalTransition(ValidationError):
    """A phase change the transition table or its evidence guards refuse."""


class Conflict(ValidationError):
    """The request was valid once but no longer is (an approval already decided)."""


class AlreadyDecided(Conflict):
    """A decision lost to an earlier one: says who decided what, and when (UTC).

    Raised from inside the write transaction that found the approval no longer pending, so
    exactly one of two racing callers succeeds and the other learns what won."""

    def __init__(self, approval_id: str, decision: str, by: str | None,
                 at: float | None) -> None:
        self.approval_id, self.decision, self.by, self.at = approval_id, decision, by, at
        who = f" by {by}" if by else ""
        when = f" at {utc_stamp(at)}" if at is not None else ""
        super().__init__(f"approval {approval_id!r}: already decided: {decision}{who}{when}")

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> AlreadyDecided:
        """From an `approvals` row whose status is no longer pending."""
        return cls(str(row["id"]), str(row["status"]), row.get("decided_by"),
                   row.get("decided_at"))


def utc_stamp(at: float) -> str:
    """A timestamp as operators compare them across machines: ISO 8601, UTC, seconds."""
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


class StoreError(ClawError):
    """The store file cannot be used: not ours, newer schema, unwritable, corrupt."""

    exit_code = 2


class StorageFault(StoreError):
    """A write failed for a reason of the storage, not of the work: the disk is full, the
    file or its folder is read-only, an I/O error, the PostgreSQL server is unreachable, a
    lock timed out. Nothing of the failed write landed, so running it again is safe; the
    engine retries (core/store/faults.py) and never records it as the work's failure."""

    exit_code = 1

    def __init__(self, path: str, cause: str, detail: str = "",
                 action: str = "cannot write", kept: str = "") -> None:
        self.path, self.cause, self.detail, self.action = path, cause, detail, action
        self.kept = kept
        why = f" ({detail})" if detail and detail != cause else ""
        after = kept or "nothing is lost, running it again is safe"
        super().__init__(f"store {path}: {action}: {cause}{why}; {after}")

    def keeping(self, kept: str) -> StorageFault:
        """The same fault, saying what the interrupted command leaves for later (a run an
        engine resumes) instead of "running it again is safe"."""
        return StorageFault(self.path, self.cause, self.detail, self.action, kept)


class StoreClosed(ClawError):
    """A write was submitted after the store was closed."""
