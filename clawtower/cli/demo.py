"""`clawtower demo`: seed tasks from examples/demo and let simulated agents work them.

The story (scripted in examples/demo/agents.yaml): tasks move through every phase, a spec
reviewer requests changes once, a flaky task retries, one task opens its circuit, one weak
spec stays in draft, and one task waits in Approvals for the operator. The console demo also
installs the example expert (examples/experts/incident-desk) and fires its webhook once, so
modes 6 and 8 show it and its confirm gate waits in Approvals after T-4's.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from clawtower.core.assets import asset
from clawtower.core.config import default_db, effects_journal
from clawtower.core.errors import StoreError, ValidationError

# The engine, the store and YAML are imported by the handler: `clawtower --help` builds this
# parser and must not load them.
from . import output

if TYPE_CHECKING:
    from clawtower.tui.protocol import ConsoleApp

DEMO_DIR = asset("examples", "demo")
# The meeting the console demo starts: agents scripted in examples/demo/agents.yaml to take
# about 6 s a round and agree in round 7, so it can be watched, stopped or granted rounds.
DEMO_MEETING = (["ops", "dev", "sec"], "Ship the invoice schema migration on Friday?", 9)
DEMO_WORKFLOW = ("release.lobster", {"version": "1.4.0"})  # in examples/workflows/


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


DEMO_ACTOR = "demo"  # the actor of everything the demo itself creates


def _reset(db: Path) -> None:
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), effects_journal(db)):
        p.unlink(missing_ok=True)


def _pick_another(db: Path) -> str:
    return (f"{db} is left untouched. Run the demo on another store: `clawtower demo --db PATH`"
            " (then give every command the same --db), or set CLAWTOWER_HOME=DIR for a"
            " fresh home")


def demo_store_owner(db: Path) -> tuple[int, str | None]:
    """(events in the store at `db`, the first one's actor). Read-only: never migrates,
    never checkpoints. A file that is not a clawtower store is refused, never replaced."""
    import sqlite3
    import urllib.parse

    uri = f"file:{urllib.parse.quote(str(db.resolve()))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
        try:
            n = int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
            first = conn.execute("SELECT actor FROM events ORDER BY seq LIMIT 1").fetchone()
            # entities an operator (or anyone but the demo) created in the demo's store
            others = conn.execute(
                "SELECT count(*) FROM events WHERE type IN ('task.created', 'workflow.started')"
                " AND actor != ?", (DEMO_ACTOR,)).fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        raise StoreError(f"demo: {db} is not a clawtower store; {_pick_another(db)}") from None
    if n and (first is None or first[0] != DEMO_ACTOR):
        raise StoreError(f"demo: {db} holds a store the demo did not make ({n} events, the"
                         f" first by {first[0] if first else '?'!r}); {_pick_another(db)}")
    if others:
        raise StoreError(f"demo: {db} is an earlier demo's store, but {others} task(s) or"
                         f" run(s) in it were created by someone else; {_pick_another(db)}")
    return n, first[0] if first else None


def claim_store(db: Path) -> str | None:
    """Make `db` ready for the demo. A missing or empty store is used as it is; an earlier
    demo's store is replaced (the line returned says so); anything else is refused (a
    StoreError naming the file and how to pick another): the demo never wipes data it did
    not create."""
    if not db.exists():
        db.parent.mkdir(parents=True, exist_ok=True)
        return None
    if db.is_dir():
        raise StoreError(f"demo: {db} is a folder, not a store file; {_pick_another(db)}")
    n, _ = demo_store_owner(db)
    if n == 0:
        return None
    _reset(db)
    return f"clawtower demo: replaced the earlier demo's store at {db} ({n} events)"


def db_flag(db: Path | str) -> str:
    """` --db PATH` for the commands the demo prints, or nothing for the default store:
    what the demo tells you to type works as typed."""
    return "" if Path(db) == default_db() else f" --db {db}"


async def seed(db: str, specs_dir: Path, *, live_sessions: bool = True,
               console: bool = False, notes: list[str] | None = None) -> list[str]:
    """Seed the demo's store. For the console (`console`), the tasks whose side effects need
    an operator are first brought to their approval gate, so the oldest approval, the first
    row of mode 2, is T-4's (the README's walk-through approves it); then the example expert
    is installed and its webhook fired once, up to its confirm gate (modes 6, 8 and 2)."""
    from clawtower.core import AgentSet, Orchestrator, Tasks, load_script, load_spec, open_store
    from clawtower.core.demo.sessions import seed_sessions

    store = await open_store(db)
    try:
        tasks = Tasks(store)
        ids, gated = [], []
        for f in sorted(specs_dir.glob("*.yaml")):
            spec = load_spec(f)
            ids.append(await tasks.create(spec, actor=DEMO_ACTOR, source=f.name))
            if spec.side_effects:
                gated.append(ids[-1])
        if console and gated:
            script = load_script(specs_dir.parent / "agents.yaml").model_copy(
                update={"speed": 0.0})
            orch = Orchestrator(store, AgentSet.simulated(script))
            for tid in gated:  # through both gates to awaiting_approval, at once
                await orch.drive(tid)
        # mode 4: a parent that fanned out to subagents, a steered loop, a live fan-out
        await seed_sessions(store, live=live_sessions)
        # mode 7: a finished and a failed flow, and one the console's flow engine drives
        from clawtower.core.demo.flows import seed_flows

        await seed_flows(store, specs_dir.parent / "agents.yaml", live=live_sessions)
        if console:  # modes 6 and 8: an installed expert whose webhook fired once
            from clawtower.core.demo.triggers import seed_expert

            out = await seed_expert(store, by=DEMO_ACTOR)
            if "skipped" in out:
                note = f"clawtower demo: no example expert: {out['skipped']}"
                if notes is not None:  # the console shows it (stdout is its screen)
                    notes.append(note)
                else:
                    print(note, flush=True)
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
    from clawtower.core import Approvals, Tasks, open_store

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
                          f"  unblock: clawtower task unblock {t['id']} retry|revise|abandon"
                          f" --reason '...'{db_flag(db)}"]
            if t["phase"] == "spec_draft":
                lines.append(f"\n{t['id']} waits in spec_draft: {t['phase_reason']}")
        if pending:
            lines.append("\nWaiting for you in Approvals:")
            for a in pending:
                lines.append(f"  {a['id']}  {a['title']}")
                lines += [f"      {ln}" for ln in a["preview"].splitlines()]
            lines.append(f"\napprove with: clawtower approve {pending[0]['id']}{db_flag(db)}"
                         "\nthen let the engine resume it: clawtower serve --until-idle"
                         f"{db_flag(db)}")
        lines.append(f"\nevents: {await store.last_seq()}   store: {db}")
        return "\n".join(lines)
    finally:
        await store.close()


def live_acts(demo: Path) -> list[Callable[[ConsoleApp], None]]:
    """What the console demo starts once it has loaded, so every mode has something alive:
    a meeting paced for a human (mode 3) and a release workflow waiting at its approval gate
    (modes 5 and 2). Each act is `act(app)`; later features (sessions, flows) add theirs
    here."""

    def meeting(app: ConsoleApp) -> None:
        names, topic, rounds = DEMO_MEETING
        app.start_meeting(names, topic, rounds, show=False)

    def workflow(app: ConsoleApp) -> None:
        name, wf_args = DEMO_WORKFLOW
        path = demo.parent / "workflows" / name
        if path.is_file():  # a CLAWTOWER_DEMO_DIR of one's own may have no workflows
            app.start_workflow(str(path), wf_args, show=False, by=DEMO_ACTOR)

    return [meeting, workflow]


def console_setup(demo: Path, speed: float) -> tuple[str, Callable[[ConsoleApp], None]]:
    """The console demo's agents file (at `speed`; a temporary copy unless 1.0, the caller
    removes it) and its `on_loaded`, which starts the live acts."""
    agents = agents_with_speed(demo / "agents.yaml", speed)
    acts = live_acts(demo)

    def on_loaded(app: ConsoleApp) -> None:
        for act in acts:
            act(app)

    return agents, on_loaded


def run_demo(args: argparse.Namespace) -> int:
    import asyncio

    from clawtower.core import AgentSet, SimScript, load_script, open_store

    from .serve import engine_until_stopped

    # Check the inputs before anything is reset or seeded.
    if not math.isfinite(args.speed) or args.speed < 0:
        raise ValidationError(f"--speed: must be a number >= 0, got {args.speed}")
    d = demo_dir()
    script: SimScript = load_script(d / "agents.yaml").model_copy(update={"speed": args.speed})
    db = Path(args.db)  # the same default store as every other command
    replaced = claim_store(db)
    if replaced:
        print(replaced, flush=True)
    if not args.headless:  # the console paints first and seeds behind its frame
        from clawtower.tui.app import run_console

        agents, on_loaded = console_setup(d, args.speed)
        seeded: list[str] = []

        async def prepare() -> list[str]:
            notes: list[str] = []
            seeded.extend(await seed(str(db), d / "specs", console=True, notes=notes))
            return notes

        try:
            return run_console(str(db), run_engine=True, agents_file=agents, operator=None,
                               on_loaded=on_loaded, prepare=prepare)
        finally:
            if agents != str(d / "agents.yaml"):
                Path(agents).unlink(missing_ok=True)
            if seeded:
                print(f"clawtower demo: seeded {len(seeded)} tasks into {db}", flush=True)
    ids = asyncio.run(seed(str(db), d / "specs", live_sessions=False))
    print(f"clawtower demo: seeded {len(ids)} tasks into {db}", flush=True)

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
