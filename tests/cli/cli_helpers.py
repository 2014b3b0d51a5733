"""Helpers for the CLI tests: run the real `clawtower` entry point, look at a store without
changing it, and drive a task through the protocol to a pending approval.

No __init__.py in tests/cli: a package named `cli` under tests/ would shadow the real one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "examples" / "demo" / "specs"
CLAWTOWER = Path(sys.executable).with_name("clawtower")
OPERATOR = "tester"


@dataclass
class Result:
    """What an in-process `main()` call returned and printed."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


Run = Callable[..., Result]


def spec(name: str) -> str:
    """Path of an example spec by its number prefix, e.g. spec('01')."""
    (found,) = SPECS.glob(f"{name}-*.yaml")
    return str(found)


def child_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["CLAWTOWER_HOME"] = str(home)
    env["CLAWTOWER_OPERATOR"] = OPERATOR
    env.pop("CLAWTOWER_DEMO_DIR", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_cli(args: list[str], home: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the installed console script, as a user would."""
    return subprocess.run([str(CLAWTOWER), *args], env=child_env(home), capture_output=True,
                          text=True, timeout=timeout, cwd=str(home.parent))


def err_lines(stderr: str) -> list[str]:
    return stderr.splitlines()


def _ro(db: Path) -> sqlite3.Connection:
    # read-only: a reader of ours must never checkpoint or otherwise touch the file
    uri = f"file:{urllib.parse.quote(str(db.resolve()))}?mode=ro"
    return sqlite3.connect(uri, uri=True)


def max_seq(db: Path) -> int:
    conn = _ro(db)
    try:
        return int(conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])
    finally:
        conn.close()


def query(db: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = _ro(db)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


@dataclass(frozen=True)
class StoreState:
    """What must not change when a command fails: the log's end and the file's bytes."""

    seq: int
    db: str | None
    wal: str | None


def state(db: Path) -> StoreState:
    return StoreState(max_seq(db), digest(db), digest(Path(f"{db}-wal")))


def set_user_version(db: Path, version: int) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute(f"PRAGMA user_version={version}")
        conn.commit()
    finally:
        conn.close()


async def _executor_attempt(db: Path, task_id: str, attempt: int) -> None:
    """The executor's writes of one successful attempt (the CLI has no executor commands)."""
    from clawtower.core import Tasks, open_store

    store = await open_store(db)
    try:
        t = Tasks(store)
        await t.heartbeat(task_id, attempt, actor="builder", note="working")
        await t.artifact(task_id, attempt, "notes.md", "file:///tmp/notes.md", actor="builder",
                         summary="the release notes")
        await t.plan_effect(task_id, attempt, "notify", "Post the notes to #customers",
                            actor="builder", target="chat://customers")
        await t.finish_attempt(task_id, attempt, ok=True, actor="builder")
    finally:
        await store.close()


def executor_attempt(db: Path, task_id: str, attempt: int) -> None:
    asyncio.run(_executor_attempt(db, task_id, attempt))
