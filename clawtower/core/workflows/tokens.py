"""Resume tokens: Lobster's shape, our secret.

A token is what Lobster emits, base64url of `{"protocolVersion":1,"v":1,"kind":"workflow-file",
"stateKey":"workflow_resume_<run>_<secret>"}`; the secret has 192 random bits. The store keeps
only sha256(secret) on the paused run (bound to that run and that gate), compares it in
constant time, and forgets it when the gate is passed: a token works once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from .load import WorkflowError

PREFIX = "workflow_resume_"
_URLSAFE = re.compile(r"[A-Za-z0-9_-]*")


@dataclass(frozen=True)
class TokenRef:
    run_id: str
    secret: str


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_token(run_id: str) -> tuple[str, str]:
    """(token, sha256 of its secret)."""
    secret = secrets.token_urlsafe(24)
    state_key = f"{PREFIX}{run_id}_{secret}"
    body = json.dumps({"protocolVersion": 1, "v": 1, "kind": "workflow-file",
                       "stateKey": state_key}, separators=(",", ":"))
    return _b64url(body.encode("utf-8")), hash_secret(secret)


def matches(secret: str, stored_hash: str | None) -> bool:
    if not stored_hash:
        return False
    return hmac.compare_digest(hash_secret(secret), stored_hash)


def decode_token(token: str) -> TokenRef | None:
    """The run a token names, or None when it is well formed but not one of ours.

    WorkflowError("Invalid token" and friends, parse_error) for what Lobster refuses."""
    text = str(token)
    if not _URLSAFE.fullmatch(text):  # a token as we write it passes as it is
        text = "".join(ch for ch in text if ch.isalnum() or ch in "-_")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        payload: Any = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise WorkflowError("Invalid token", "parse_error") from None
    if not isinstance(payload, dict):
        raise WorkflowError("Invalid token", "parse_error")
    if payload.get("protocolVersion") != 1:
        raise WorkflowError("Unsupported protocol version", "parse_error")
    if payload.get("v") != 1:
        raise WorkflowError("Unsupported token version", "parse_error")
    kind = payload.get("kind")
    key = payload.get("stateKey")
    if kind == "pipeline-resume":
        if not isinstance(key, str) or not key:
            raise WorkflowError("Invalid token", "parse_error")
        return None
    if kind != "workflow-file":
        raise WorkflowError("Invalid token", "parse_error")
    if not isinstance(key, str) or not key:
        if not isinstance(payload.get("filePath"), str):
            raise WorkflowError("Invalid workflow token", "parse_error")
        return None  # an inline-state token from an old Lobster: nothing of ours
    key = key.replace("workflow-resume_", PREFIX, 1)
    if not key.startswith(PREFIX):
        return None
    run_id, sep, secret = key[len(PREFIX):].partition("_")
    if not sep or not run_id or not secret:
        return None
    return TokenRef(run_id, secret)
