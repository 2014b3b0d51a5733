"""Issue 40's soak: storage faults instead of kills, at random moments, and what they cost.

    .venv/bin/python scripts/fault_soak.py [--backend sqlite|postgres|both] [--trials N]
        [--posts N] [--seed S]

Each trial runs, at once, on one disk (SQLite: a store per protocol in one folder) or one
PostgreSQL server (a database per protocol):
- four engine processes (tests/helpers/engine_host.py: the composed engine, every worker),
  one per protocol, each with its work made as a user makes it (the protocol contract's
  `create`: tests/test_protocol_contract.py): a flow of six session turns, a meeting left
  for the engine to adopt, a session with subagent-style tool rounds, a workflow run;
- `clawtower serve` taking N webhook posts (20) spread over the fault, its trigger worker
  running each as the hook expert's process.
At a random moment (0.3-2.5 s in) the storage fails for 2-4 s: SQLite, the disk fills (the
drill, $CLAWTOWER_DRILL_DISK_FULL: SQLite's own SQLITE_FULL for any write that needs a new
page); PostgreSQL, the server is stopped (`pg_ctl stop -m fast`) and started again.

Counted per trial: work accepted (one item per protocol, and each webhook answered 202),
completed exactly once (the contract's check), duplicated, lost, failed by the fault,
webhooks answered 503 (nothing queued: checked) and `/health` seen 503 during the fault,
engine or server processes that exited before they were stopped, stores that do not verify.
Loopback only, every process ours, every wait bounded.
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
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "helpers")]

from clawtower.core.store import open_store  # noqa: E402
from clawtower.core.store.faults import DRILL_ENV  # noqa: E402
from tests.helpers.hook_expert import TOKEN, install_hook_expert  # noqa: E402
from tests.helpers.procs import child_env  # noqa: E402
from tests.test_protocol_contract import CONFIGS, FLOWS, KINDS  # noqa: E402
from tests.triggers.serve_helpers import Served  # noqa: E402

HOST = ROOT / "tests" / "helpers" / "engine_host.py"
HOOK = "/hooks/hook-expert/inbound"
ENGINE_PROTOCOLS = ("flows", "meetings", "sessions", "workflows")
#: paced so the work spans the fault (the contract's fast casts, with think time)
PACED = {
    "flows": FLOWS.replace("speed: 0.2", "speed: 1").replace("delay_ms: [200, 700]",
                                                           "delay_ms: [200, 400]"),
    "meetings": CONFIGS["meetings"]["fast"].replace("speed: 0", "speed: 1\ndelay_ms: [600, 600]"),
    "sessions": "speed: 1\ndelay_ms: [500, 500]\n",
    "workflows": "speed: 0\n",
}
WAIT_S = 180.0


class Storage:
    """The shared storage of a trial: where each store lives, and how it fails."""

    def __init__(self, backend: str, folder: Path) -> None:
        self.backend = backend
        self.flag = folder / "disk-full"
        self.pg_data = folder / "pg" / "data"
        self.server = ""
        if backend == "postgres":
            from clawtower.core.store import pglocal

            self.server = pglocal.start(self.pg_data)

    def target(self, folder: Path) -> str:
        if self.backend == "sqlite":
            return str(folder / "store.db")
        import psycopg

        name = "f_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        import urllib.parse

        parts = urllib.parse.urlsplit(self.server)
        return urllib.parse.urlunsplit(parts._replace(path="/" + name))

    def env(self) -> dict[str, str]:
        return {DRILL_ENV: str(self.flag)} if self.backend == "sqlite" else {}

    def fail(self) -> None:
        if self.backend == "sqlite":
            self.flag.touch()
        else:
            from clawtower.core.store import pglocal

            pglocal.stop(self.pg_data)

    def recover(self) -> None:
        if self.backend == "sqlite":
            self.flag.unlink(missing_ok=True)
        else:
            from clawtower.core.store import pglocal

            pglocal.start(self.pg_data)

    def close(self) -> None:
        if self.backend == "postgres":
            from clawtower.core.store import pglocal

            pglocal.stop(self.pg_data)


async def _with_store(target: str, fn: Any) -> Any:
    store = await open_store(target)
    try:
        return await fn(store)
    finally:
        await store.close()


class Hosted:
    """One protocol's work and the engine process running it."""

    def __init__(self, name: str, folder: Path, storage: Storage) -> None:
        self.name = name
        self.folder = folder
        folder.mkdir(parents=True)
        self.protocol = KINDS[name](folder)
        if name == "workflows":
            self.protocol.steps = 8  # type: ignore[attr-defined]
        self.target = storage.target(folder)
        self.config = folder / "config.yaml"
        self.config.write_text(PACED[name])
        os.environ["CLAWTOWER_HOME"] = str(folder / "home")
        self.wid = asyncio.run(_with_store(self.target, self.protocol.create))
        self.proc = subprocess.Popen(
            [sys.executable, str(HOST), self.target, str(self.config), "1.5"],
            env=child_env(CLAWTOWER_HOME=str(folder / "home"), CLAWTOWER_OPERATOR="soak",
                          CLAWTOWER_CONFIG=str(self.config), **storage.env()),
            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "READY":
            raise RuntimeError(f"{name}: engine host did not start: {line}"
                               f" {self.proc.stderr.read() if self.proc.stderr else ''}")

    def ended(self) -> bool:
        async def ask(store: Any) -> bool:
            row = await store.fetchone(self.protocol.status, (self.wid,))
            return row is not None and row["status"] not in ("running", "queued", "retry")
        return bool(asyncio.run(_with_store(self.target, ask)))

    def outcome(self) -> dict[str, Any]:
        async def check(store: Any) -> dict[str, Any]:
            row = await store.fetchone(self.protocol.status, (self.wid,))
            status = row["status"] if row else None
            try:
                await self.protocol.check(store, self.wid, killed=False)
                once, why = True, ""
            except AssertionError as exc:
                once, why = False, str(exc)[:300]
            return {"status": status, "once": once, "why": why,
                    "verify": await store.verify_projections()}
        return dict(asyncio.run(_with_store(self.target, check)))


def _post_over(url: str, n: int, span: float, out: dict[str, Any], rng: random.Random) -> None:
    """`n` webhook posts spread over `span` seconds; `/health` polled meanwhile."""
    import httpx

    with httpx.Client(base_url=url, timeout=60) as client:
        for i in range(n):
            try:
                r = client.post(HOOK, headers={"Authorization": f"Bearer {TOKEN}"},
                                json={"event_id": f"e-{i}", "contact_id": f"k-{i % 5}"})
                out["codes"][r.status_code] += 1
                if r.status_code == 202 and r.json()["status"] == "queued":
                    out["accepted"].append(r.json()["id"])
                elif r.status_code == 503:
                    out["refused"].append(f"e-{i}")
            except httpx.HTTPError as exc:
                out["codes"][type(exc).__name__] += 1
            try:
                if client.get("/health").status_code == 503:
                    out["health_503"] += 1
            except httpx.HTTPError:
                out["codes"]["health-error"] += 1
            time.sleep(span / n * rng.uniform(0.5, 1.5))


def trial(backend: str, folder: Path, posts: int, rng: random.Random) -> dict[str, Any]:
    storage = Storage(backend, folder)
    hosts: list[Hosted] = []
    served: Served | None = None
    try:
        for name in ENGINE_PROTOCOLS:
            hosts.append(Hosted(name, folder / name, storage))
        hooks = folder / "webhooks"
        hooks.mkdir()
        os.environ["CLAWTOWER_HOME"] = str(hooks / "home")
        install_hook_expert(hooks)
        hook_target = storage.target(hooks)
        saved = {k: os.environ.get(k) for k in storage.env()}
        os.environ.update(storage.env())  # Served passes the environment on
        try:
            served = Served(hooks / "home", hook_target)  # type: ignore[arg-type]
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        web: dict[str, Any] = {"codes": Counter(), "accepted": [], "refused": [],
                               "health_503": 0}
        at, hold = rng.uniform(0.3, 2.5), rng.uniform(2.0, 4.0)
        poster = threading.Thread(target=_post_over,
                                  args=(served.url, posts, at + hold + 2.0, web, rng))
        poster.start()
        time.sleep(at)
        storage.fail()
        time.sleep(hold)
        storage.recover()
        poster.join(timeout=WAIT_S)
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not all(h.ended() for h in hosts):
            time.sleep(0.5)
        exited = [h.name for h in hosts if h.proc.poll() is not None]
        results = {h.name: h.outcome() for h in hosts}
        hook_out = _webhooks(hook_target, web, deadline)
        if served.proc.poll() is not None:
            exited.append("serve")
        for h in hosts:  # the test helper hosts end by a kill (they trap no signal)
            h.proc.kill()
        if served.proc.poll() is None and served.stop() != 0:  # serve stops clean: exit 0
            exited.append("serve (stop)")
        served = None
        return {"at_s": round(at, 2), "hold_s": round(hold, 2), "protocols": results,
                "webhooks": hook_out, "exited": exited}
    finally:
        for h in hosts:
            if h.proc.poll() is None:
                h.proc.kill()
        if served is not None:
            served.kill()
        storage.close()


def _webhooks(target: str, web: dict[str, Any], deadline: float) -> dict[str, Any]:
    accepted = set(web["accepted"])

    async def settled(store: Any) -> list[dict[str, Any]]:
        return list(await store.fetchall("SELECT id, status, payload FROM trigger_items"))

    while True:
        items = asyncio.run(_with_store(target, settled))
        done = [i for i in items if i["status"] in ("done", "skipped", "failed", "dead",
                                                      "escalated")]
        if len(done) >= len(items) or time.monotonic() > deadline:
            break
        time.sleep(0.5)

    async def twice(store: Any) -> int:
        rows = await store.fetchall("SELECT entity_id FROM events WHERE type='trigger.linked'"
                                    " GROUP BY entity_id HAVING count(*) > 1")
        return len(rows)

    by_id = {i["id"]: i for i in items}
    events = {json.loads(i["payload"]).get("event_id") for i in items if i["payload"]}
    return {
        "codes": {str(k): v for k, v in web["codes"].items()},
        "accepted": len(accepted), "refused_503": len(web["refused"]),
        "health_503": web["health_503"],
        "lost": sum(1 for i in accepted if i not in by_id),
        "not_done": sum(1 for i in accepted if i in by_id and by_id[i]["status"] != "done"),
        "run_twice": asyncio.run(_with_store(target, twice)),
        "queued_despite_503": sum(1 for e in web["refused"] if e in events),
        "verify": asyncio.run(_with_store(target, lambda s: s.verify_projections())),
    }


def summarise(trials: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"trials": len(trials)}
    for name in ENGINE_PROTOCOLS:
        rs = [t["protocols"][name] for t in trials]
        out[name] = {"accepted": len(rs), "completed_once": sum(r["once"] for r in rs),
                     "failed": sum(r["status"] == "failed" for r in rs),
                     "not_verified": sum(bool(r["verify"]) for r in rs)}
    ws = [t["webhooks"] for t in trials]
    out["webhooks"] = {k: sum(w[k] for w in ws) for k in (
        "accepted", "refused_503", "health_503", "lost", "not_done", "run_twice",
        "queued_despite_503")}
    out["webhooks"]["not_verified"] = sum(bool(w["verify"]) for w in ws)
    out["processes_exited"] = sum(len(t["exited"]) for t in trials)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--posts", type=int, default=20)
    ap.add_argument("--seed", type=int, default=40)
    args = ap.parse_args()
    os.environ.pop(DRILL_ENV, None)  # this process only creates and checks
    os.environ.pop("CLAWTOWER_CONFIG", None)
    rng = random.Random(args.seed)
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    report: dict[str, Any] = {}
    bad = False
    for backend in backends:
        trials = []
        for n in range(args.trials):
            with tempfile.TemporaryDirectory(prefix="clawtower-faults-") as tmp:
                t0 = time.monotonic()
                t = trial(backend, Path(tmp), args.posts, rng)
                t["seconds"] = round(time.monotonic() - t0, 1)
            wrong = [f"{k}: {v['why'] or v['status']}" for k, v in t["protocols"].items()
                     if not v["once"] or v["verify"]]
            w = t["webhooks"]
            if w["lost"] or w["not_done"] or w["run_twice"] or w["queued_despite_503"] \
                    or w["verify"]:
                wrong.append(f"webhooks: {w}")
            if t["exited"]:
                wrong.append(f"exited: {t['exited']}")
            bad = bad or bool(wrong)
            print(f"{backend} trial {n + 1}/{args.trials}: fault at {t['at_s']} s for"
                  f" {t['hold_s']} s, {t['seconds']} s; webhooks {w['accepted']} accepted,"
                  f" {w['refused_503']} refused 503, health 503 x{w['health_503']}"
                  + (f"; WRONG: {wrong}" if wrong else "; all once"), flush=True)
            trials.append(t)
        report[backend] = summarise(trials)
    print(json.dumps(report, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
