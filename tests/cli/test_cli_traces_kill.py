"""Live trace export across a kill -9 of the engine (`clawtower serve` with `telemetry:` in
clawtower.yaml): every span reaches the collector once; the engine started again takes the
exporter's lease over and sends nothing a second time, then sends the spans of new work."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import CLAWTOWER, child_env
from trace_helpers import collector, session_tree

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _until(check: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail("timed out")
        time.sleep(0.05)


def _serve(home: Path, db: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([str(CLAWTOWER), "serve", "--no-http", "--db", str(db)],
                            env=child_env(home), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _kill9(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def test_each_span_once_across_a_kill_9(tmp_path: Path, home: Path) -> None:
    db = tmp_path / "kill.db"
    sid = asyncio.run(session_tree(db))
    home.mkdir(parents=True, exist_ok=True)
    with collector() as (got, url):
        (home / "clawtower.yaml").write_text(
            f"telemetry:\n  otlp_endpoint: {url}\n  interval_s: 0.1\n")
        proc = _serve(home, db)
        try:
            _until(lambda: _rows(db, "SELECT 1 FROM events WHERE type='traces.exported'"))
        finally:
            _kill9(proc)
        assert len(got.spans) == 24 and len({r["span_id"] for r in got.spans}) == 24
        # new work while no engine runs, then an engine again: it takes the lease over from
        # the killed one (after its expiry) and sends the new spans, nothing twice
        from clawtower.core.sessions.service import Sessions
        from clawtower.core.store import open_store

        async def send() -> None:
            store = await open_store(db)
            try:
                await Sessions(store).send(sid, "once more", sender="alice")
            finally:
                await store.close()

        asyncio.run(send())
        proc = _serve(home, db)
        try:
            _until(lambda: len(_rows(db, "SELECT 1 FROM events WHERE"
                                         " type='traces.exported'")) == 2)
            time.sleep(0.5)  # a step more: nothing left to send
        finally:
            _kill9(proc)
    counts = Counter(r["span_id"] for r in got.spans)
    assert len(got.spans) == 27
    assert [n for n in counts.values() if n > 1] == [2]  # the session's span, its end moved
    (twice,) = [k for k, n in counts.items() if n > 1]
    assert {r["name"] for r in got.spans if r["span_id"] == twice} == {
        f"session {sid} (lead)"}
    took_over = _rows(db, "SELECT payload FROM events WHERE type='lease.acquired' AND"
                          " entity_id LIKE 'traces:%' ORDER BY seq")
    assert len(took_over) == 2 and '"took_over_from": null' not in took_over[1][0]
