"""PostgreSQL for the tests: $CLAWTOWER_TEST_PG (a server URL), else a throwaway local server
started from the pgserver wheel for the session. Each test gets a fresh database.

When no server can be had, PostgreSQL tests skip with the reason, except in CI (CI=true, or
CLAWTOWER_REQUIRE_PG=1 as .ci/run sets), where they fail: CI never silently skips the
PostgreSQL half of the suite."""

from __future__ import annotations

import os
import urllib.parse
import uuid
from collections.abc import Iterator

import pytest
from reaper import throwaway_folder


def _unavailable(why: str) -> None:
    msg = f"PostgreSQL unavailable: {why}"
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"} or \
            os.environ.get("CLAWTOWER_REQUIRE_PG") == "1":
        pytest.fail(msg + " (CI runs the PostgreSQL half of the suite; it never skips it)")
    pytest.skip(msg)


def server_url() -> Iterator[str]:
    url = os.environ.get("CLAWTOWER_TEST_PG")
    if url:
        try:
            import psycopg

            psycopg.connect(url, connect_timeout=10).close()
        except Exception as exc:
            _unavailable(f"CLAWTOWER_TEST_PG: {type(exc).__name__}: {exc}")
            return
        yield url
        return
    try:
        import psycopg

        from clawtower.core.store import pglocal

        folder = throwaway_folder("clawtower-pg-")
        url = pglocal.start(folder / "data", stop_at_exit=True)
    except Exception as exc:
        _unavailable(f"{type(exc).__name__}: {exc}")
        return
    yield url


def with_database(url: str, name: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + name))


def fresh_database(server: str) -> Iterator[str]:
    import psycopg

    name = "t_" + uuid.uuid4().hex[:16]
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield with_database(server, name)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
