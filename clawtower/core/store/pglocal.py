"""A local PostgreSQL server without root: the `pgserver` wheel (the `postgres` extra) ships
the server binaries; this starts one on a data folder and says its URL. Used by
`clawtower store pg-start DIR` and by the tests' fixture; a real server is used by URL."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Any

from ..errors import StoreError

INSTALL_HINT = "pip install 'clawtower[postgres]'"


def _pgserver() -> Any:
    try:
        import pgserver
    except ImportError:
        raise StoreError(f"a local PostgreSQL server needs the pgserver wheel ({INSTALL_HINT})"
                         ) from None
    return pgserver


def start(folder: str | os.PathLike[str], *, stop_at_exit: bool = False) -> str:
    """Start (or find running) the server whose data lives in `folder`; return its URL.

    With `stop_at_exit` the server stops (and its folder is deleted) when this process exits;
    otherwise it keeps running for other processes until `stop(folder)`."""
    pgserver = _pgserver()
    path = Path(folder).expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
        cached = pgserver.PostgresServer._instances.get(path)
        if cached is not None:
            # pgserver hands back its handle from earlier in this process without looking
            # whether that server was stopped since (pg-stop, a fault test): start it again
            with cached._lock:
                cached.ensure_postgres_running()
            server = cached
        else:
            server = pgserver.get_server(path, cleanup_mode="delete" if stop_at_exit else None)
    except (OSError, subprocess.CalledProcessError, AssertionError) as exc:
        raise StoreError(f"{path}: cannot start PostgreSQL ({exc})") from None
    return str(server.get_uri())


def _pg_ctl(folder: Path, *args: str) -> None:
    pgserver = _pgserver()
    from pgserver import _commands

    pg_ctl = getattr(_commands, "pg_ctl")  # noqa: B009 (made at import time, untyped)

    user = "pgserver" if os.name == "posix" and os.geteuid() == 0 else None
    try:
        pg_ctl(list(args), pgdata=folder, user=user)
    except subprocess.CalledProcessError as exc:
        raise StoreError(f"{folder}: pg_ctl {' '.join(args)} failed ({exc})") from None
    del pgserver


def stop(folder: str | os.PathLike[str]) -> None:
    """Stop the server whose data lives in `folder` (its data stays)."""
    path = Path(folder).expanduser().resolve()
    if not (path / "PG_VERSION").exists():
        raise StoreError(f"{path}: no PostgreSQL data folder here")
    with contextlib.suppress(StoreError):
        _pg_ctl(path, "-w", "-m", "fast", "stop")


def restart(folder: str | os.PathLike[str]) -> None:
    """Restart the server in `folder` (fault tests: every connection is cut)."""
    _pg_ctl(Path(folder).expanduser().resolve(), "-w", "-m", "fast", "restart")
