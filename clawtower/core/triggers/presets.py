"""Presets: what a trigger's `preset:` does to a raw webhook payload before its keys are read.

A preset is a pure, local function (payload -> enriched payload) run on the ack path, so
`dedupe_key` and `concurrency_key` are resolved after enrichment, as the spec asks. It must
not do I/O: the 202 waits on it. Add one with `register("name", fn)`.

Shipped: `generic` (a JSON object as it is) and `gmail`, the seed's example: a Gmail
Pub/Sub-style push (`message.data` base64 JSON with `emailAddress`/`historyId`, or a
`messages` list) enriched with `message_id`, `sender`, and `contact_id` (the sender's
address, lower-cased: one queue per correspondent).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from typing import Any

Preset = Callable[[dict[str, Any]], dict[str, Any]]
_PRESETS: dict[str, Preset] = {}
ADDRESS = re.compile(r"<?([A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,})>?")


class PresetError(ValueError):
    """The payload does not have the shape the preset reads (a 422 for the sender)."""


def register(name: str, fn: Preset) -> None:
    _PRESETS[name] = fn


def names() -> list[str]:
    return sorted(_PRESETS)


def apply(name: str | None, payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` enriched by preset `name`; an unknown preset leaves it as it is (the
    package may name a preset another framework ships)."""
    fn = _PRESETS.get(name or "generic")
    return payload if fn is None else fn(payload)


def _generic(payload: dict[str, Any]) -> dict[str, Any]:
    return payload


def _gmail(payload: dict[str, Any]) -> dict[str, Any]:
    out = dict(payload)
    msg = payload.get("message")
    if isinstance(msg, dict) and isinstance(msg.get("data"), str):
        try:
            decoded = json.loads(base64.b64decode(msg["data"], validate=True))
        except (binascii.Error, ValueError) as exc:
            raise PresetError("gmail: message.data is not base64 JSON") from exc
        if not isinstance(decoded, dict):
            raise PresetError("gmail: message.data is not a JSON object")
        out.update({k: v for k, v in decoded.items() if k not in out})
        if "message_id" not in out and isinstance(msg.get("messageId"), str):
            out["message_id"] = msg["messageId"]
    messages = payload.get("messages")
    first = messages[0] if isinstance(messages, list) and messages else None
    if isinstance(first, dict):
        out.setdefault("message_id", first.get("id"))
        sender = first.get("from") or first.get("sender")
        if isinstance(sender, str):
            out.setdefault("sender", sender)
    sender = out.get("sender") or out.get("emailAddress")
    if isinstance(sender, str):
        m = ADDRESS.search(sender)
        if m:
            out.setdefault("contact_id", m.group(1).lower())
    return out


register("generic", _generic)
register("gmail", _gmail)
