"""Where things live: CLAWTOWER_HOME (default ~/.clawtower), the store and the project config
file inside it."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("CLAWTOWER_HOME") or Path.home() / ".clawtower").expanduser()


def default_db() -> Path:
    return home() / "clawtower.db"


def config_path(explicit: str | os.PathLike[str] | None = None) -> tuple[Path, bool]:
    """The project config file and whether it was asked for: `explicit` (a --config flag),
    else $CLAWTOWER_CONFIG, else $CLAWTOWER_HOME/clawtower.yaml. A file that was asked for
    must exist; the default one may be absent (then the built-in simulator cast plays)."""
    if explicit:
        return Path(explicit).expanduser(), True
    env = os.environ.get("CLAWTOWER_CONFIG")
    if env:
        return Path(env).expanduser(), True
    return home() / "clawtower.yaml", False


def effects_journal(db_path: str | os.PathLike[str]) -> Path:
    """Approved side effects of the simulated world land next to the store (a PostgreSQL
    store has no folder: under the home folder, named after the database)."""
    text = os.fspath(db_path)
    if text.startswith(("postgresql://", "postgres://")):
        import hashlib
        import urllib.parse

        name = urllib.parse.urlsplit(text).path.strip("/") or "postgres"
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        return home() / f"{name}-{digest}.effects.jsonl"
    p = Path(db_path)
    return p.with_name(p.stem + ".effects.jsonl")
