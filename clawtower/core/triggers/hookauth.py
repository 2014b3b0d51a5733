"""Webhook credentials: `$CLAWTOWER_HOME/expert-config/<expert>/hooks.yaml` (outside the
package, like tool bindings; written 0600 by `clawtower triggers auth`).

```yaml
ticket_opened:            # the trigger's name
  token: s3cret           # `Authorization: Bearer s3cret`, or
  secret: hmac-key        # X-Hub-Signature-256: sha256=HEX over "<timestamp>.<raw body>"
  max_bytes: 262144       # body limit (default 256 KiB, at most 1 MiB)
  window: 300             # seconds a signed timestamp stays acceptable (default 300)
```

A trigger without a token or secret accepts nothing (401): a webhook is never open by
default. Comparisons are constant time; a signature is checked against the raw bytes.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import config, files
from ..errors import ValidationError
from ..limits import MAX_JSON_BYTES, check_secret, read_text
from ..safe_yaml import loads

DEFAULT_MAX_BYTES = 256 * 1024
DEFAULT_WINDOW_S = 300.0
SIGNATURE_HEADER = "x-hub-signature-256"
TIMESTAMP_HEADER = "x-clawtower-timestamp"


class Random:
    """`write(token=RANDOM)`: make a random credential (`triggers auth --token` with no
    value). A sentinel, not "": an empty string is what an unset variable gives, and is
    refused."""

    def __repr__(self) -> str:
        return "RANDOM"


RANDOM = Random()


@dataclass(frozen=True)
class HookAuth:
    token: str | None = None
    secret: str | None = None
    max_bytes: int = DEFAULT_MAX_BYTES
    window_s: float = DEFAULT_WINDOW_S


def hooks_file(expert: str) -> Path:
    return config.home() / "expert-config" / expert / "hooks.yaml"


def load(expert: str) -> dict[str, HookAuth]:
    path = hooks_file(expert)
    if not path.is_file():
        return {}
    return parse(read_text(path), path)  # bounded: a FIFO or a huge file is one error


def parse(text: str, path: Path) -> dict[str, HookAuth]:
    """The credentials in `text` (the file's content), or ValidationError naming the field;
    what `write` checks new content with before it touches the file."""
    data = loads(text, str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValidationError(f"{path}: must be a mapping of trigger names")
    out = {}
    for name, d in data.items():
        if not isinstance(d, dict):
            raise ValidationError(f"{path}:{name}: must be a mapping")
        token, secret = d.get("token"), d.get("secret")
        mb = d.get("max_bytes", DEFAULT_MAX_BYTES)
        win = d.get("window", DEFAULT_WINDOW_S)
        if token is not None and (not isinstance(token, str) or len(token) < 16):
            raise ValidationError(f"{path}:{name}.token: must be a string of 16+ characters")
        if secret is not None and (not isinstance(secret, str) or len(secret) < 16):
            raise ValidationError(f"{path}:{name}.secret: must be a string of 16+ characters")
        if isinstance(mb, bool) or not isinstance(mb, int) or not 1 <= mb <= MAX_JSON_BYTES:
            raise ValidationError(f"{path}:{name}.max_bytes: 1..{MAX_JSON_BYTES}")
        if isinstance(win, bool) or not isinstance(win, (int, float)) or not 1 <= win <= 86400:
            raise ValidationError(f"{path}:{name}.window: 1..86400 seconds")
        out[str(name)] = HookAuth(token, secret, mb, float(win))
    return out


def write(expert: str, trigger: str, *, token: str | Random | None = None,
          secret: str | Random | None = None, max_bytes: int | None = None) -> HookAuth:
    """Set a trigger's credentials (a random one for each asked as RANDOM; an empty one is
    refused before the file is touched); returns them."""
    import yaml

    for name, given in (("token", token), ("secret", secret)):
        if isinstance(given, str):
            check_secret(given, f"{trigger}.{name}")
    path = hooks_file(expert)
    data: dict[str, Any] = {}
    if path.is_file():
        raw = loads(read_text(path), str(path))
        data = raw if isinstance(raw, dict) else {}
    entry = dict(data.get(trigger) or {})
    if token is not None:
        entry["token"] = secrets.token_urlsafe(32) if isinstance(token, Random) else token
    if secret is not None:
        entry["secret"] = secrets.token_urlsafe(32) if isinstance(secret, Random) else secret
    if max_bytes is not None:
        entry["max_bytes"] = max_bytes
    data[trigger] = entry
    text = yaml.safe_dump(data, sort_keys=True)
    # checked by the loader that will read it, before the file is touched: a refusal
    # leaves the old file byte for byte
    files.write_text(path, text, check=lambda t: parse(t, path), mode=0o600)
    return parse(text, path)[trigger]


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header value a sender computes: `sha256=` HMAC over `ts.` + body."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def check(auth: HookAuth | None, headers: dict[str, str], body: bytes, now: float
          ) -> str | None:
    """None when the request is authentic, else why not (the 401's message)."""
    if auth is None or (auth.token is None and auth.secret is None):
        return "this trigger has no webhook credentials (clawtower triggers auth)"
    authz = headers.get("authorization", "")
    if auth.token is not None and authz:
        scheme, _, given = authz.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
                given.strip().encode(), auth.token.encode()):
            return None
        return "bad bearer token"
    if auth.secret is None:
        return "missing bearer token"
    sig = headers.get(SIGNATURE_HEADER)
    ts = headers.get(TIMESTAMP_HEADER)
    if not sig:
        return f"missing {SIGNATURE_HEADER} header"
    if not ts:
        return f"missing {TIMESTAMP_HEADER} header"
    try:
        t = float(ts)
    except ValueError:
        return f"{TIMESTAMP_HEADER}: not a unix time"
    if not abs(now - t) <= auth.window_s:
        return f"{TIMESTAMP_HEADER}: outside the {auth.window_s:g}s window (replayed or stale)"
    if not hmac.compare_digest(sig.strip().encode(), sign(auth.secret, ts, body).encode()):
        return "bad signature"
    return None
