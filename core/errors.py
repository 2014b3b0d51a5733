"""Errors of the public API. Each maps to a CLI exit code and a one-line message.

Usage/validation errors (exit 2) name the file, field or id at fault; runtime faults exit 1.
"""

from __future__ import annotations


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


class StoreError(ClawError):
    """The store file cannot be used: not ours, newer schema, unwritable, corrupt."""

    exit_code = 2


class StoreClosed(ClawError):
    """A write was submitted after the store was closed."""
