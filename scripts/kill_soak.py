"""Repeat issue 22's crash tests at random points and count what a crash costs.

    .venv/bin/python scripts/kill_soak.py [--scenario two-servers|kill-serve|sessions|all]
        [--trials N] [--posts N] [--seed S] [--host serve|console]

- two-servers: two `clawtower serve` on one store, N webhook posts (150) spread over both;
- kill-serve: one `clawtower serve`, the posts, a SIGKILL at a random moment while runs are
  in flight, a new serve on the same store, the rest of the posts;
- sessions: a session worker process running three 12-round tool tasks is SIGKILLed at a
  random moment, a message is sent to each session while no worker runs, and a second
  worker takes over.

`--host` is the process that runs the engine (and is SIGKILLed): `serve` (the default), or
`console`: the real console, headless (scripts/console_host.py), on the same store. Then the
webhooks are posted to `clawtower serve --no-engine` processes (the webhook server only,
one per engine, never killed), and in the sessions scenario a console replaces each session
worker process (on the workers' simulator: 60 ms a model call for the first, 0 for the
second).

Counted per trial (loopback only, every process ours, bounded by timeouts): accepted posts
(202 queued), accepted items lost (never stored), given more than one run, or ending other
than done (escalated, dead, still active), runs waiting for an operator although their
interrupted step had no outside effect (hook-expert's process has only a model step and the
compiler's `finish`), and for sessions: turns left open, interrupted tasks that never
completed, messages lost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "helpers")]

from tests.helpers.console_child import Consoled  # noqa: E402
from tests.helpers.hook_expert import TOKEN, install_hook_expert  # noqa: E402
from tests.helpers.procs import Child, child_env  # noqa: E402
from tests.triggers.serve_helpers import Served, rows, wait_rows  # noqa: E402

HOOK = "/hooks/hook-expert/inbound"
TERMINAL = ("done", "skipped", "escalated", "dead", "abandoned", "dropped", "failed")


def _post(urls: list[str], start: int, n: int, rng: random.Random) -> list[str]:
    import httpx

    async def go() -> list[str]:
        ids: list[str] = []
        clients = [httpx.AsyncClient(base_url=u, timeout=60) for u in urls]
        try:
            sem = asyncio.Semaphore(16)

            async def one(i: int) -> None:
                c = rng.choice(clients)
                async with sem:
                    r = await c.post(HOOK, headers={"Authorization": f"Bearer {TOKEN}"},
                                     json={"event_id": f"e-{i}", "contact_id": f"k-{i % 10}"})
                if r.status_code == 202 and r.json()["status"] == "queued":
                    ids.append(r.json()["id"])

            await asyncio.gather(*(one(i) for i in range(start, start + n)))
        finally:
            for c in clients:
                await c.aclose()
        return ids

    return asyncio.run(go())


class Engine:
    """One host of the engine and the address its webhooks are posted to: a `serve`, or a
    console beside a `serve --no-engine` (`intake`: one to share, else its own)."""

    def __init__(self, host: str, home: Path, db: Path, intake: Served | None = None) -> None:
        self.intake: Served | None = None
        self.proc: Served | Consoled
        if host == "serve":
            self.proc = Served(home, db)
            self.url = self.proc.url
            return
        if intake is None:
            intake = self.intake = Served(home, db, ["--no-engine"])
        self.url = intake.url
        self.proc = Consoled(home, db)

    def kill(self) -> None:
        """SIGKILL the engine's host (the webhook server only when it is the host)."""
        self.proc.kill()

    def stop(self) -> None:
        self.proc.stop()
        if self.intake is not None:
            self.intake.stop()


def _settled(db: Path, want: int, timeout: float) -> list[dict[str, Any]]:
    def ok(r: list[dict[str, Any]]) -> bool:
        if len(r) < want:
            return False
        held = {i["lane"] for i in r if i["status"] == "paused"}
        return all(i["status"] in (*TERMINAL, "paused") or (
            i["status"] in ("queued", "retry") and i["lane"] in held) for i in r)

    try:
        return wait_rows(db, "SELECT t.id, t.lane, t.status, t.run_id, r.gate FROM"
                             " trigger_items t LEFT JOIN workflow_runs r ON r.id = t.run_id",
                         ok, timeout=timeout)
    except AssertionError:
        return rows(db, "SELECT t.id, t.lane, t.status, t.run_id, r.gate FROM trigger_items t"
                        " LEFT JOIN workflow_runs r ON r.id = t.run_id")


def _count(db: Path, accepted: list[str], items: list[dict[str, Any]]) -> dict[str, Any]:
    by_id = {i["id"]: i for i in items}
    lost = [i for i in accepted if i not in by_id]
    not_done = [by_id[i] for i in accepted if i in by_id and by_id[i]["status"] != "done"]
    waiting = [i for i in not_done if i["status"] == "paused" and i["gate"] == "interrupted"]
    errors = rows(db, "SELECT error FROM workflow_runs WHERE status='failed'")
    twice = rows(db, "SELECT entity_id FROM events WHERE type='trigger.linked'"
                     " GROUP BY entity_id HAVING count(*) > 1")  # an item given two runs
    return {"accepted": len(accepted), "lost": len(lost), "run_twice": len(twice),
            "escalated": sum(1 for i in not_done if i["status"] in ("escalated", "dead")),
            "not_done": len(not_done), "waiting_for_operator": len(waiting),
            "temp_file_races": sum(1 for e in errors if "FileNotFoundError" in (e["error"] or "")),
            "adopted_reruns": len(rows(db, "SELECT 1 FROM events WHERE type='workflow.adopted'"
                                           " AND json_extract(payload, '$.rerun')"))}


def _home(tmp: Path) -> Path:
    home = tmp / "home"
    os.environ["CLAWTOWER_HOME"] = str(home)
    install_hook_expert(tmp)
    return home


def two_servers(tmp: Path, posts: int, rng: random.Random, host: str) -> dict[str, Any]:
    home, db = _home(tmp), tmp / "two.db"
    a = Engine(host, home, db)
    b = Engine(host, home, db)
    try:
        accepted = _post([a.url, b.url], 0, posts, rng)
        items = _settled(db, len(accepted), 600)
    finally:
        a.stop()
        b.stop()
    return _count(db, accepted, items)


def kill_serve(tmp: Path, posts: int, rng: random.Random, host: str) -> dict[str, Any]:
    home, db = _home(tmp), tmp / "kill.db"
    first_n = rng.randint(posts // 3, posts)
    srv = Engine(host, home, db)
    killed_in = 0
    try:
        try:
            accepted = _post([srv.url], 0, first_n, rng)
            done_at = rng.randint(0, max(0, first_n - 5))
            wait_rows(db, "SELECT id FROM trigger_items WHERE status='done'",
                      lambda r: len(r) >= done_at, timeout=600)
            time.sleep(rng.uniform(0, 0.5))
            killed_in = rows(db, "SELECT count(*) AS n FROM workflow_steps WHERE"
                                 " status='running' AND parent IS NULL")[0]["n"]
        finally:
            srv.kill()
        srv2 = Engine(host, home, db, intake=srv.intake)  # a console: the same webhooks
        try:
            accepted += _post([srv2.url], first_n, posts - first_n, rng)
            items = _settled(db, len(accepted), 600)
        finally:
            srv2.stop()
    finally:
        if srv.intake is not None:  # the webhook server beside the consoles
            srv.intake.stop()
    out = _count(db, accepted, items)
    out["steps_killed_in_flight"] = killed_in
    return out


class Worker(Child):
    """tests/helpers/session_worker.py in a child process: the session worker alone."""

    def __init__(self, db: Path, delay_ms: int, until_idle: bool = False) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "helpers" / "session_worker.py"), str(db),
             str(delay_ms), "1.5", *(["--until-idle"] if until_idle else [])],
            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if not until_idle:
            assert self.proc.stdout is not None
            assert self.proc.stdout.readline().strip() == "READY"


def _session_host(host: str, tmp: Path, db: Path, until_idle: bool = False) -> Worker | Consoled:
    """The first worker: 60 ms a model call (killed 0-10 rounds in); the second: 0 ms."""
    delay = 0 if until_idle else 60
    if host == "serve":
        return Worker(db, delay, until_idle)
    home = tmp / "home"  # the console's sessions on the worker's simulator
    home.mkdir(exist_ok=True)
    (home / "clawtower.yaml").write_text(f"speed: 1\ndelay_ms: [{delay}, {delay}]\n")
    return Consoled(home, db, until_idle)


async def _sessions_trial(tmp: Path, rng: random.Random, host: str) -> dict[str, Any]:
    from clawtower.core.sessions.service import Sessions
    from clawtower.core.sessions.specs import AgentSpecConfig
    from clawtower.core.sessions.takeover import open_turns
    from clawtower.core.store import open_store

    db = tmp / "s.db"
    store = await open_store(db)
    try:
        s = Sessions(store)
        await s.set_spec("worker", AgentSpecConfig.model_validate(
            {"policy": {"tools": ["text.count"]},
             "context_policy": {"budgets": {"max_tool_rounds": 30}}}))
        sids = [await s.create(agent="worker") for _ in range(3)]
        for i, sid in enumerate(sids):
            await s.send(sid, f"#work 12 task {i}")
        first = await asyncio.to_thread(_session_host, host, tmp, db)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                r = await store.fetchall("SELECT count(*) AS n FROM turns WHERE"
                                         " status='running'")
                if r[0]["n"] >= 1:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(rng.uniform(0, 0.6))  # 60 ms a model call: 0-10 rounds in
        finally:
            first.kill()
        open_before = len(await store.fetchall("SELECT 1 FROM turns WHERE status='running'"))
        for sid in sids:
            await s.send(sid, f"status of {sid}?")
        second = await asyncio.to_thread(_session_host, host, tmp, db, True)
        code = await asyncio.to_thread(second.wait, 240)
        inbound = {json.loads(e["payload"])["msg_id"] for e in await store.fetchall(
            "SELECT payload FROM events WHERE type='session.inbound'")}
        taken = {json.loads(m["meta"]).get("inbound") for m in await store.fetchall(
            "SELECT meta FROM session_messages WHERE role='user'")}
        drained = {json.loads(b["data"]).get("msg_id") for b in await store.fetchall(
            "SELECT data FROM session_backlog WHERE kind='message' AND status='drained'")}
        incomplete = 0
        for i, sid in enumerate(sids):
            replies = [m["text"] for m in (await s.get(sid))["messages"]
                       if m["role"] == "assistant"]
            if not any(t.startswith((f"Done: #work 12 task {i}",
                                     f"Resumed and finished: #work 12 task {i}"))
                       for t in replies):
                incomplete += 1
        return {"worker_exit": code,
                "open_turns_after_kill": open_before,
                "turns_left_open": len(await store.fetchall(
                    "SELECT 1 FROM turns WHERE status='running'")),
                "verify_open_turns": len(await open_turns(store)),
                "interrupted_closed": len(await store.fetchall(
                    "SELECT 1 FROM turns WHERE status='interrupted'")),
                "taken_over_with_message": len(await store.fetchall(
                    "SELECT 1 FROM session_backlog WHERE kind='resume' AND"
                    " json_extract(data, '$.taken_over')")),
                "tasks_incomplete": incomplete,
                "messages_lost": len([m for m in inbound if m not in taken | drained]),
                "projection_problems": len(await store.verify_projections())}
    finally:
        await store.close()


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--scenario", default="all",
                   choices=["two-servers", "kill-serve", "sessions", "all"])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--posts", type=int, default=150)
    p.add_argument("--seed", type=int, default=22)
    p.add_argument("--host", default="serve", choices=["serve", "console"],
                   help="the process that runs the engine and is killed (default serve)")
    a = p.parse_args()
    rng = random.Random(a.seed)
    scenarios = ["two-servers", "kill-serve", "sessions"] if a.scenario == "all" \
        else [a.scenario]
    totals: dict[str, dict[str, int]] = {}
    for sc in scenarios:
        for t in range(a.trials):
            with tempfile.TemporaryDirectory(prefix=f"clawtower-soak-{sc}-") as d:
                tmp = Path(d)
                started = time.monotonic()
                if sc == "two-servers":
                    res = two_servers(tmp, a.posts, rng, a.host)
                elif sc == "kill-serve":
                    res = kill_serve(tmp, a.posts, rng, a.host)
                else:
                    res = asyncio.run(_sessions_trial(tmp, rng, a.host))
            res["seconds"] = round(time.monotonic() - started, 1)
            print(json.dumps({"host": a.host, "scenario": sc, "trial": t + 1, **res}),
                  flush=True)
            agg = totals.setdefault(sc, {"trials": 0})
            agg["trials"] += 1
            for k, v in res.items():
                if isinstance(v, (int, float)) and k != "seconds":
                    agg[k] = agg.get(k, 0) + int(v)
    print(json.dumps({"host": a.host, "seed": a.seed, "totals": totals}, indent=1))
    bad = sum(agg.get(k, 0) for agg in totals.values() for k in (
        "lost", "run_twice", "escalated", "not_done", "waiting_for_operator", "temp_file_races",
        "turns_left_open", "verify_open_turns", "tasks_incomplete", "messages_lost",
        "projection_problems"))
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
