"""Recognising a PostgreSQL store URL without importing the driver."""

from __future__ import annotations

import urllib.parse


def is_postgres_url(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def redact(url: str) -> str:
    """The URL without its password: it names the store in messages."""
    parts = urllib.parse.urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
