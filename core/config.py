"""Where things live: CLAWTOWER_HOME (default ~/.clawtower) and the store inside it."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("CLAWTOWER_HOME") or Path.home() / ".clawtower").expanduser()


def default_db() -> Path:
    return home() / "clawtower.db"


def effects_journal(db_path: str | os.PathLike[str]) -> Path:
    """Approved side effects of the simulated world land next to the store."""
    p = Path(db_path)
    return p.with_name(p.stem + ".effects.jsonl")
