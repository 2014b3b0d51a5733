"""Deterministic trace and span ids: hashes of the events that open them.

A span's key names the event that opened it (its seq) and what it is; the store's own
identity (the commit time of its first event, `salt`) keeps two stores' `S-1` apart in one
collector. Same log, same ids: exporting twice sends the same spans."""

from __future__ import annotations

import hashlib


def _hex(text: str, chars: int) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()[:chars]
    return digest if int(digest, 16) else "1".rjust(chars, "0")  # all-zero ids are invalid


def trace_id(salt: str, root_key: str) -> str:
    """32 hex digits (OTel's 16-byte trace id)."""
    return _hex(f"clawtower-trace\0{salt}\0{root_key}", 32)


def span_id(salt: str, key: str) -> str:
    """16 hex digits (OTel's 8-byte span id)."""
    return _hex(f"clawtower-span\0{salt}\0{key}", 16)
