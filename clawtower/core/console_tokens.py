"""Web console credentials: `$CLAWTOWER_HOME/console-tokens.yaml` (0600), one token per
operator, stored hashed.

```yaml
alice:                  # the operator the token signs in as (`--by`): approvals record it
  sha256: 9f86d0...     # SHA-256 of the token, hex; the token itself is never stored
  created: 1764123456.0
  link_used: false      # the printed `?token=` link has been exchanged for a session
```

Written like the webhook credentials next door (`core/triggers/hookauth.py`): through
`core.files.write_text`, checked by the loader that reads it, 0600. Unlike those, the token
is kept only as a hash: `clawtower console --web` prints it once, when it is made, and never
again. A token is 256 random bits, so one SHA-256 is enough (no password stretching: there is
no dictionary to guess from); compares are constant time.

The printed link is single use: once its `?token=` has been exchanged for a session cookie,
the same token in a query string is refused (a URL lives on in history, proxy logs and
Referer headers); the token still signs in through the login form or an
`Authorization: Bearer` header.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import config, files
from .errors import ValidationError
from .limits import check_name, read_text
from .safe_yaml import loads

PREFIX = "ct_"  # says what a leaked string is (like GitHub's ghp_)
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ConsoleToken:
    operator: str
    sha256: str
    created: float
    link_used: bool = False

    @property
    def fingerprint(self) -> str:
        """What identifies the token without revealing it (as `triggers auth` prints)."""
        return "sha256:" + self.sha256[:16]


def tokens_file() -> Path:
    return config.home() / "console-tokens.yaml"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def parse(text: str, path: Path) -> dict[str, ConsoleToken]:
    """The tokens in `text` (the file's content), or ValidationError naming the field."""
    data = loads(text, str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValidationError(f"{path}: must be a mapping of operator names")
    out = {}
    for name, d in data.items():
        if not isinstance(name, str):
            raise ValidationError(f"{path}: {name!r}: an operator name must be a string")
        check_name(name, f"{path}: operator")
        if not isinstance(d, dict):
            raise ValidationError(f"{path}:{name}: must be a mapping")
        h, created, used = d.get("sha256"), d.get("created", 0.0), d.get("link_used", False)
        if not isinstance(h, str) or not _HEX64.match(h):
            raise ValidationError(f"{path}:{name}.sha256: must be 64 lower-case hex digits")
        if isinstance(created, bool) or not isinstance(created, (int, float)):
            raise ValidationError(f"{path}:{name}.created: must be a unix time")
        if not isinstance(used, bool):
            raise ValidationError(f"{path}:{name}.link_used: must be true or false")
        out[name] = ConsoleToken(name, h, float(created), used)
    return out


def load() -> dict[str, ConsoleToken]:
    path = tokens_file()
    if not path.is_file():
        return {}
    return parse(read_text(path), path)  # bounded: a FIFO or a huge file is one error


def _write(tokens: dict[str, ConsoleToken]) -> None:
    import yaml

    path = tokens_file()
    data: dict[str, Any] = {t.operator: {"sha256": t.sha256, "created": t.created,
                                         "link_used": t.link_used}
                            for t in tokens.values()}
    text = yaml.safe_dump(data, sort_keys=True)
    files.write_text(path, text, check=lambda t: parse(t, path), mode=0o600)


def issue(operator: str) -> str:
    """A new token for `operator` (replacing theirs: a rotation); returns it, the only time
    it exists in clear. Sessions signed in with the old one end at their next request."""
    check_name(operator, "--by")
    token = PREFIX + secrets.token_urlsafe(32)
    tokens = load()
    tokens[operator] = ConsoleToken(operator, digest(token), time.time())
    _write(tokens)
    return token


def verify(token: str) -> ConsoleToken | None:
    """The operator `token` belongs to, or None. Every entry is compared (constant time
    each), so the time taken does not say which operator came close."""
    given = digest(token)
    found = None
    for t in load().values():
        if hmac.compare_digest(given, t.sha256):
            found = t
    return found


def current(operator: str, sha256: str) -> bool:
    """Whether `operator`'s token is still the one hashed `sha256` (not rotated since)."""
    t = load().get(operator)
    return t is not None and hmac.compare_digest(t.sha256, sha256)


def mark_link_used(token: ConsoleToken) -> None:
    """The `?token=` link of `token` has been exchanged: refuse it in query strings from
    now on (persisted, so a restart does not reopen it)."""
    tokens = load()
    t = tokens.get(token.operator)
    if t is not None and t.sha256 == token.sha256 and not t.link_used:
        tokens[t.operator] = ConsoleToken(t.operator, t.sha256, t.created, True)
        _write(tokens)


__all__ = ["ConsoleToken", "current", "digest", "issue", "load", "mark_link_used",
           "tokens_file", "verify"]
