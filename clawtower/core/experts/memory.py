"""An expert's learnings and state files as memories of namespace `expert:<name>` (issue 25
item 5), so `expert chat` recalls them like any agent's memories; the files stay what they
were (projections of the expert's events: learning.py, state.py).

Under the package's rules (openexperts sections 10 and 12):
- a learning is a memory once persisted (`auto`, or `confirm` and approved; a `manual` one
  never is) and while its file keeps it (the newest `max_entries_per_file` of its scope;
  archived ones are forgotten); none when `learning.enabled` is not true;
- a state file is a memory while it holds more than its template: a `scope: session` file
  reset for a new chat is forgotten until the expert writes to it again.

`sync` makes the memories match (one commit for the writes; unchanged ones emit nothing);
`expert chat` runs it when it opens a session, after the files are rebuilt. A learning's
memory an operator corrected or forgot stays as they left it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..memory.service import MAX_CONTENT, Memories
from ..store.interface import Store
from .learning import current, proposed, settings
from .package import Package

LEARNING, STATE = "learning", "state"
SYNC = "expert sync"  # the reason of every write `sync` makes


def _operators(row: dict[str, Any] | None) -> bool:
    """A learning's memory an operator corrected or forgot (the console, the CLI): it stays
    as they left it (a state file's memory always follows the file, which the expert
    reads and writes)."""
    if row is None:
        return False
    why = row["forgotten_reason"] if row["forgotten"] else row["reason"]
    return not str(why).startswith(SYNC)


def namespace(expert: str) -> str:
    return f"expert:{expert}"


def _clip(text: str) -> str:
    """A memory holds at most MAX_CONTENT characters: a longer text keeps its end (a state
    file's newest notes are appended last)."""
    return text if len(text) <= MAX_CONTENT else "…" + text[-(MAX_CONTENT - 1):]


def learning_text(p: dict[str, Any]) -> str:
    src = f" Source: {p['source']}." if p.get("source") else ""
    return _clip(f"{p['title']}. Observation: {p['observation']} Correction:"
                 f" {p['correction']} (scope: {p['scope']}; confidence:"
                 f" {p['confidence']}).{src}")


async def wanted(store: Store, pkg: Package, workspace: Path) -> dict[str, tuple[str, str]]:
    """{key: (category, content)}: the memories the package's learnings and state files
    make now."""
    out: dict[str, tuple[str, str]] = {}
    enabled, _, limit = settings(pkg)
    if enabled:
        for p in current(await proposed(store, pkg), limit):
            out[f"{LEARNING}:{p['scope']}:{p['seq']}"] = (LEARNING, learning_text(p))
    for rel in pkg.state:
        f = workspace / rel
        text = f.read_text(encoding="utf-8") if f.is_file() else ""
        if text.strip() and text != (pkg.root / rel).read_text(encoding="utf-8"):
            out[f"{STATE}:{rel}"] = (STATE, _clip(text))
    return out


async def sync(store: Store, pkg: Package, workspace: Path, *, by: str = "expert"
               ) -> dict[str, int]:
    """Make `expert:<name>` match the package's learnings and state files; counts of what
    was stored, updated, left unchanged and forgotten."""
    from ..memory.events import MemoryStored

    ns = namespace(pkg.name)
    want = await wanted(store, pkg, workspace)
    mem = Memories(store)
    rows = {r["key"]: r for r in await mem.listing(ns, include_forgotten=True)}
    payloads = [MemoryStored(namespace=ns, key=key, content=content, category=category,
                             reason=f"{SYNC} {category}")
                for key, (category, content) in sorted(want.items())
                if category == STATE or not _operators(rows.get(key))]
    results = await mem.import_many(payloads, by=by) if payloads else []
    counts = {s: sum(1 for r in results if r["status"] == s)
              for s in ("stored", "updated", "unchanged")}
    stale = [k for k, r in rows.items() if k not in want and not r["forgotten"]
             and k.startswith((f"{LEARNING}:", f"{STATE}:"))]
    for key in stale:
        why = ("archived (past max_entries_per_file) or learning turned off"
               if key.startswith(LEARNING) else
               "no longer more than its template (a scope: session file is reset per chat)")
        await mem.forget(ns, key, by=by, reason=f"{SYNC}: {why}")
    counts["forgotten"] = len(stale)
    return counts


__all__ = ["learning_text", "namespace", "sync", "wanted"]
