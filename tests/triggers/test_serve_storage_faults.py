"""`clawtower serve` through a full disk (issue 40): it never exits, `/health` says the
condition (503), webhooks are answered 503 with nothing queued (and Retry-After) while the
disk is full, the runs accepted before go on once it has room, each exactly once; stderr
says when the fault began and ended. The full disk is SQLite's own SQLITE_FULL, chosen by
the drill ($CLAWTOWER_DRILL_DISK_FULL) while its flag file exists."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from hook_expert import TOKEN, install_hook_expert

from clawtower.core.store.faults import DRILL_ENV
from tests.triggers.serve_helpers import Served, rows, wait_rows

HOOK = "/hooks/hook-expert/inbound"


def post(client: httpx.Client, i: int) -> httpx.Response:
    return client.post(HOOK, headers={"Authorization": f"Bearer {TOKEN}"},
                       json={"event_id": f"e-{i}", "contact_id": f"k-{i}"})


def test_serve_answers_503_through_a_full_disk_and_finishes_what_it_accepted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("CLAWTOWER_HOME", str(home))
    install_hook_expert(tmp_path)
    flag = tmp_path / "disk-full"
    monkeypatch.setenv(DRILL_ENV, str(flag))  # Served passes the environment on
    db = tmp_path / "serve.db"
    served = Served(home, db)
    accepted: list[str] = []
    try:
        with httpx.Client(base_url=served.url, timeout=60) as client:
            for i in range(3):
                r = post(client, i)
                assert r.status_code == 202, r.text
                accepted.append(r.json()["id"])
            flag.touch()
            refused = health = None
            # the last page's free room runs out within a few posts. The drill fails only
            # writes that need a new page, so a small update landing between (a lease
            # renewed) can clear the fault again until the next insert: the post and the
            # health check after it are repeated until both say it (a condition, not a time)
            for i in range(3, 300):
                r = post(client, i)
                if r.status_code == 202:
                    accepted.append(r.json()["id"])
                    continue
                assert r.status_code == 503, r.text
                refused = r
                health = client.get("/health")
                if health.status_code == 503:
                    break
            assert refused is not None, "the full disk never refused a webhook"
            assert refused.json()["error"] == "not stored (disk full); nothing was queued"
            assert refused.headers["Retry-After"] == "5"
            assert health is not None and health.status_code == 503, health
            assert health.json()["store"].startswith("disk full since")
            assert served.proc.poll() is None  # serve goes on
            flag.unlink()
            deadline = time.monotonic() + 120
            while client.get("/health").status_code != 200:
                assert time.monotonic() < deadline, "the store never took writes again"
                assert served.proc.poll() is None
                time.sleep(0.2)
        done = wait_rows(db, "SELECT id, status FROM trigger_items",
                         lambda rs: len(rs) == len(accepted) and all(
                             x["status"] == "done" for x in rs), timeout=120)
        assert {x["id"] for x in done} == set(accepted)  # the refused one was never queued
        twice = rows(db, "SELECT entity_id FROM events WHERE type='trigger.linked'"
                         " GROUP BY entity_id HAVING count(*) > 1")
        assert twice == []
    finally:
        code = served.stop()
    err = "".join(served.err)
    assert code == 0, err
    assert "disk full since" in err and "writable again" in err, err
    assert "Traceback" not in err and "never retrieved" not in err, err
