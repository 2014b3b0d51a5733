"""State files (`state/*.md` in the expert's workspace) as projections of events, like the
learnings files.

A compiled state step (`core.experts.step state`) only reports its note; the run records it
in its `workflow.step_finished` event. `sync` turns each such note of this expert's runs into
one `expert.state_noted` event (once: keyed by run, step and the step event's seq) and
rebuilds the files: the package template (or a `expert.state_base`) plus the notes, in step
order. A new expert session records `expert.state_reset`: `scope: session` files keep only
the notes of steps after it. The first sync of a file whose workspace copy is not the
template adopts that copy as its base (notes earlier versions appended directly are kept).

Rebuilt by `expert run` (before and after the run), `expert chat`, `expert state NAME`; a run
resumed elsewhere (an approval in the console) shows in the files at the next of these.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import files
from ..events import NewEvent
from ..store.interface import Store, WriteTx
from ..tasks.permissions import Role
from . import home
from .events import StateBase, StateNoted, StateReset
from .package import Package

TYPES = ("expert.state_base", "expert.state_noted", "expert.state_reset")


def _template(pkg: Package, rel: str) -> str:
    return (pkg.root / rel).read_text(encoding="utf-8")


def _ours(tx: WriteTx, pkg: Package) -> list[dict[str, Any]]:
    marks = ",".join("?" * len(TYPES))
    return [{"seq": r["seq"], "type": r["type"], **json.loads(r["payload"])} for r in tx.all(
        f"SELECT seq, type, payload FROM events WHERE entity='expert' AND entity_id=? AND"
        f" type IN ({marks}) ORDER BY seq", (pkg.name, *TYPES))]


def _collect(tx: WriteTx, pkg: Package, by: str) -> int:
    """One `expert.state_noted` per state-step result of this expert's runs not seen yet."""
    prefix = str(home.compiled_dir(pkg.name)) + os.sep
    runs = [r["entity_id"] for r in tx.all(
        "SELECT entity_id, payload FROM events WHERE type='workflow.started' ORDER BY seq")
        if str(json.loads(r["payload"]).get("file", "")).startswith(prefix)]
    if not runs:
        return 0
    seen = {(e["run_id"], e["step_id"], e["step_seq"]) for e in _ours(tx, pkg)
            if e["type"] == "expert.state_noted"}
    marks = ",".join("?" * len(runs))
    n = 0
    for r in tx.all(f"SELECT seq, entity_id, payload FROM events WHERE"
                    f" type='workflow.step_finished' AND entity_id IN ({marks}) ORDER BY seq",
                    tuple(runs)):
        p = json.loads(r["payload"])
        out = (p.get("result") or {}).get("json")
        if not isinstance(out, dict) or not isinstance(out.get("state"), str) \
                or "appended" not in out or out["state"] not in pkg.state:
            continue
        key = (r["entity_id"], p["step_id"], int(r["seq"]))
        if key in seen:
            continue
        tx.emit(NewEvent(entity_id=pkg.name, actor=by, role=Role.EXECUTOR.value,
                         payload=StateNoted(expert=pkg.name, file=out["state"],
                                            note=str(out["appended"]),
                                            at=str(out.get("at", "")), run_id=key[0],
                                            step_id=key[1], step_seq=key[2])))
        n += 1
    return n


def _adopt(tx: WriteTx, pkg: Package, ws: Path, by: str) -> None:
    known = {e["file"] for e in _ours(tx, pkg) if e["type"] != "expert.state_reset"}
    for rel in pkg.state:
        p = ws / rel
        if rel in known or not p.is_file():
            continue
        text = p.read_text(encoding="utf-8")
        if text != _template(pkg, rel):
            tx.emit(NewEvent(entity_id=pkg.name, actor=by, role=Role.EXECUTOR.value,
                             payload=StateBase(expert=pkg.name, file=rel, text=text)))


@dataclass
class _File:
    base: str
    base_seq: int = 0
    reset_seq: int = -1  # the event seq of the last reset
    reset_at: int = -1  # its at_seq
    reset_run: str = ""  # the run whose session it began (its notes only), if a run's
    notes: list[dict[str, Any]] = field(default_factory=list)


def render(pkg: Package, events: list[dict[str, Any]]) -> dict[str, tuple[str, int]]:
    """Each state file's text (and its number of notes) from the events: the projection."""
    files = {rel: _File(_template(pkg, rel)) for rel in pkg.state}
    for e in events:
        if e["type"] == "expert.state_base" and e["file"] in files:
            files[e["file"]].base, files[e["file"]].base_seq = e["text"], e["seq"]
        elif e["type"] == "expert.state_noted" and e["file"] in files:
            files[e["file"]].notes.append(e)
        elif e["type"] == "expert.state_reset":
            for rel in e["files"]:
                if rel in files:
                    f = files[rel]
                    f.reset_seq, f.reset_at = e["seq"], e["at_seq"]
                    f.reset_run = str(e.get("run_id") or "")
    out: dict[str, tuple[str, int]] = {}
    for rel, f in files.items():
        session = pkg.state[rel].meta.get("scope") == "session"
        base = f.base if not session or f.base_seq > f.reset_seq else _template(pkg, rel)
        notes = sorted((n for n in f.notes if not session or (
            n["run_id"] == f.reset_run if f.reset_run else n["step_seq"] > f.reset_at)),
                       key=lambda n: n["step_seq"])
        out[rel] = (base + "".join(f"\n- {n['at']} UTC: {n['note']}\n" for n in notes),
                    len(notes))
    return out


def _write(ws: Path, texts: dict[str, tuple[str, int]]) -> None:
    for rel, (text, _) in texts.items():
        files.write_if_changed(ws / rel, text)


def reset_in(tx: WriteTx, pkg: Package, by: str, run_id: str = "") -> None:
    """Begin a session of `scope: session` files (nothing when the package has none); with
    `run_id` (in the commit that starts the run) the session is that run's alone."""
    session = [rel for rel, d in pkg.state.items() if d.meta.get("scope") == "session"]
    if not session:
        return
    row = tx.one("SELECT coalesce(max(seq), 0) AS s FROM events")
    tx.emit(NewEvent(entity_id=pkg.name, actor=by, role=Role.EXECUTOR.value,
                     payload=StateReset(expert=pkg.name, files=session,
                                        at_seq=int(row["s"]) if row else 0, run_id=run_id)))


async def sync(store: Store, pkg: Package, ws: Path, *, reset: bool = False,
               by: str = "expert") -> dict[str, int]:
    """Record new state notes (and, with `reset`, the start of a new session), then rebuild
    the files; notes per file."""
    def command(tx: WriteTx) -> list[dict[str, Any]]:
        _adopt(tx, pkg, ws, by)
        _collect(tx, pkg, by)
        if reset:
            reset_in(tx, pkg, by)
        return _ours(tx, pkg)

    events = await store.execute(command)
    texts = render(pkg, events)
    _write(ws, texts)
    return {rel: n for rel, (_, n) in texts.items()}


__all__ = ["render", "reset_in", "sync"]
