"""One way to open a store: a path (or `sqlite:///path`) is the embedded SQLite store, a
`postgresql://` URL the shared PostgreSQL one. Every caller (CLI, console, serve) opens
through here, so `--db` and `CLAWTOWER_DB` take either."""

from __future__ import annotations

import os

from ..clock import Clock
from .interface import Store
from .postgres_url import is_postgres_url


async def open_store(
    target: str | os.PathLike[str], *, synchronous: str = "NORMAL", clock: Clock | None = None
) -> Store:
    """Open (creating or migrating) the store at `target`."""
    text = os.fspath(target)
    if is_postgres_url(text):
        from .postgres import open_postgres  # psycopg is needed only for PostgreSQL

        return await open_postgres(text, clock=clock)
    from .sqlite import open_store as open_sqlite

    if text.startswith("sqlite:///"):
        text = text[len("sqlite://"):]
    return await open_sqlite(text, synchronous=synchronous, clock=clock)
