"""The migration ledger (schema v11): every migration a store has, by name, checksum and
time; a store that passed a migration without applying it, or applied another script, is
named by `store info`; a store from a newer release is refused on both backends (those
tests: tests/cli/test_cli_bad_input.py, tests/test_store_postgres.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from clawtower.cli.main import main
from clawtower.core.store import open_store
from clawtower.core.store.ledger import ledger_problems, migration_checksum
from clawtower.core.store.schema import LATEST_VERSION, LEDGER_VERSION, MIGRATIONS


async def test_a_new_store_records_every_migration(store: Any) -> None:
    ledger = await store.migrations()
    assert [r["version"] for r in ledger] == [v for v, _ in MIGRATIONS]
    assert [r["checksum"] for r in ledger] == [migration_checksum(s) for _, s in MIGRATIONS]
    assert {r["name"] for r in ledger} >= {"log and tasks", "sessions", "migration ledger"}
    assert ledger_problems(ledger) == []


async def test_an_older_store_gets_its_ledger_when_migrated(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    s = await open_store(db)
    await s.close()
    conn = sqlite3.connect(db)  # the file as a build before the ledger left it (v9)
    conn.execute("DROP TABLE schema_migrations")
    conn.execute("DROP TABLE trigger_auth_failures")  # v12
    conn.execute("ALTER TABLE flows DROP COLUMN executor")  # v13
    conn.execute("PRAGMA user_version=9")
    conn.commit()
    for table in ("memory_vocab", "memory_fts", "memories"):  # v14
        conn.execute(f"DROP TABLE {table}")
    for table in ("embedding_cache", "memory_vectors"):  # v16
        conn.execute(f"DROP TABLE {table}")
    for table in ("auth_failures", "console_sessions"):  # v20
        conn.execute(f"DROP TABLE {table}")
    conn.close()
    s = await open_store(db)
    try:
        ledger = await s.migrations()
        assert [r["version"] for r in ledger] == [v for v, _ in MIGRATIONS]
        assert ledger_problems(ledger) == []
        row = await s.fetchone("PRAGMA user_version")
        assert row is not None and next(iter(row.values())) == LATEST_VERSION
    finally:
        await s.close()


def test_ledger_problems_name_a_skipped_migration_and_another_script() -> None:
    rows = [{"version": v, "name": f"n{v}", "checksum": migration_checksum(s),
             "applied_at": 0.0} for v, s in MIGRATIONS if v != 7]
    rows[0]["checksum"] = "0" * 64
    problems = ledger_problems(rows)
    assert any(p.startswith("migration v7 (flows): not in the ledger") for p in problems)
    assert any(p.startswith("migration v1 (n1): applied from another script") for p in problems)
    assert len(problems) == 2


def test_store_info_prints_the_ledger(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    db = str(tmp_path / "i.db")

    async def make() -> None:
        s = await open_store(db)
        await s.close()

    asyncio.run(make())
    capsys.readouterr()
    assert main(["store", "info", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "migrations:" in out and f"v{LEDGER_VERSION} migration ledger" in out
    assert "problem:" not in out


async def test_postgres_keeps_the_ledger_in_its_meta_table(pg_url: str) -> None:
    s = await open_store(pg_url)
    try:
        ledger = await s.migrations()
        assert [r["version"] for r in ledger] == [v for v, _ in MIGRATIONS]
        assert ledger_problems(ledger) == []
    finally:
        await s.close()
