"""`clawtower demo`: seed tasks from examples/demo and let simulated agents work them.

The story (scripted in examples/demo/agents.yaml): tasks move through every phase, a spec
reviewer requests changes once, a flaky task retries, one task opens its circuit, one weak
spec stays in draft, and one task waits in Approvals for the operator.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path

from core.config import effects_journal, home
from core.errors import ValidationError

# The engine, the store and YAML are imported by the handler: `clawtower --help` builds this
# parser and must not load them.
from . import output

DEMO_DIR = Path(__file__).resolve().parents[1] / "examples" / "demo"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = subparsers.add_parser(
        "demo", help="seed a live demo with simulated agents and open the console")
    d.add_argument("--headless", action="store_true",
                   help="run without a screen until a human is needed, print a summary")
    d.add_argument("--speed", type=float, default=1.0,
                   help="multiply simulated think times (0 = instant)")
    d.set_defaults(handler=run_demo)


def demo_dir() -> Path:
    d = Path(os.environ.get("CLAWTOWER_DEMO_DIR") or DEMO_DIR)
    if not (d / "agents.yaml").is_file() or not (d / "specs").is_dir():
        raise ValidationError(f"{d}: demo data not found (agents.yaml and specs/ expected)")
    return d


def _reset(db: Path) -> None:
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), effects_journal(db)):
        p.unlink(missing_ok=True)


async def seed(db: str, specs_dir: Path, *, live_sessions: bool = True) -> list[str]:
    from core import Tasks, load_spec, open_store
    from core.sessions.demo import seed_sessions

    store = await open_store(db)
    try:
        tasks = Tasks(store)
        ids = []
        for f in sorted(specs_dir.glob("*.yaml")):
            ids.append(await tasks.create(load_spec(f), actor="demo", source=f.name))
        # mode 4: a parent that fanned out to subagents, a steered loop, a live fan-out
        await seed_sessions(store, live=live_sessions)
        return ids
    finally:
        await store.close()


def agents_with_speed(src: Path, speed: float) -> str:
    import yaml

    if speed == 1.0:
        return str(src)
    data = yaml.safe_load(src.read_text(encoding="utf-8"))
    data["speed"] = speed
    fd, path = tempfile.mkstemp(prefix="clawtower-demo-agents-", suffix=".yaml")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        yaml.safe_dump(data, f)
    return path


async def summary(db: str) -> str:
    from core import Approvals, Tasks, open_store

    store = await open_store(db)
    try:
        tasks = await Tasks(store).list()
        pending = await Approvals(store).pending()
        lines = ["", "Demo summary", output.table(
            [[t["id"], t["phase"], str(t["attempts"]), t["title"]] for t in tasks],
            ["ID", "PHASE", "ATT", "TITLE"])]
        for t in tasks:
            if t["phase"] == "circuit_open":
                full = await Tasks(store).get(t["id"])
                c = full["circuit"] or {}
                lines += [f"\n{t['id']} opened its circuit: {c.get('failure_summary', '')}",
                          "  unblock: clawtower task transition "
                          f"{t['id']} execution_ready --as orchestrator --reason '...'"]
            if t["phase"] == "spec_draft":
                lines.append(f"\n{t['id']} waits in spec_draft: {t['phase_reason']}")
        if pending:
            lines.append("\nWaiting for you in Approvals:")
            for a in pending:
                lines.append(f"  {a['id']}  {a['title']}")
                lines += [f"      {ln}" for ln in a["preview"].splitlines()]
            lines.append(f"\napprove with: clawtower approve {pending[0]['id']} --db {db}"
                         f"\nthen let the engine resume it: clawtower serve --until-idle --db {db}")
        lines.append(f"\nevents: {await store.last_seq()}   store: {db}")
        return "\n".join(lines)
    finally:
        await store.close()


def run_demo(args: argparse.Namespace) -> int:
    import asyncio

    from core import AgentSet, SimScript, load_script, open_store

    from .serve import engine_until_stopped

    # Check the inputs before anything is reset or seeded.
    if not math.isfinite(args.speed) or args.speed < 0:
        raise ValidationError(f"--speed: must be a number >= 0, got {args.speed}")
    d = demo_dir()
    script: SimScript = load_script(d / "agents.yaml").model_copy(update={"speed": args.speed})
    given = getattr(args, "db_given", False)
    db = Path(args.db) if given else home() / "demo.db"
    if not given:
        db.parent.mkdir(parents=True, exist_ok=True)
        _reset(db)
    ids = asyncio.run(seed(str(db), d / "specs", live_sessions=not args.headless))
    print(f"clawtower demo: seeded {len(ids)} tasks into {db}", flush=True)
    if not args.headless:
        from tui.app import run_console

        agents = agents_with_speed(d / "agents.yaml", args.speed)
        try:
            return run_console(str(db), run_engine=True, agents_script=agents, operator=None)
        finally:
            if agents != str(d / "agents.yaml"):
                Path(agents).unlink(missing_ok=True)

    async def headless() -> int:
        store = await open_store(db)
        try:
            return await engine_until_stopped(store, AgentSet.simulated(script), str(db),
                                               until_idle=True)
        finally:
            await store.close()

    code = asyncio.run(headless())
    print(asyncio.run(summary(str(db))))
    sys.stdout.flush()
    return code
