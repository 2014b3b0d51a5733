"""Continuous learning (spec section 12): proposed learnings are events; the learnings files
in the expert's workspace are projections of them, rebuilt from the log.

`learning.approval` decides persistence: `auto` persists at once; `confirm` puts the
learning on the one approvals list (kind `expert_learning`) and it is persisted once approved;
`manual` never persists it: it is written to `learnings/_drafts.md` for a human to act on.
Each file keeps the newest `max_entries_per_file` entries; older ones move to
`learnings/archive/<scope>.md`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .. import files
from ..errors import ValidationError
from ..events import NewEvent
from ..store.interface import Store, WriteTx
from ..tasks import commands as c
from ..tasks.permissions import Role
from .events import LearningProposed
from .package import Package

KIND = "expert_learning"


def settings(pkg: Package) -> tuple[bool, str, int]:
    lr = pkg.section("learning")
    tier = lr.get("approval") if lr.get("approval") in ("auto", "confirm", "manual") else "confirm"
    mx = lr.get("max_entries_per_file")
    limit = mx if isinstance(mx, int) and not isinstance(mx, bool) and mx > 0 else 50
    return lr.get("enabled") is True, str(tier), limit


def _file_for(scope: str) -> str:
    return "_package.md" if scope == "package" else f"{scope}.md"


async def propose(store: Store, pkg: Package, workspace: Path, *, scope: str, title: str,
                  observation: str, correction: str, source: str = "",
                  confidence: str = "medium", by: str = "expert") -> dict[str, Any]:
    enabled, tier, _ = settings(pkg)
    if not enabled:
        raise ValidationError("expert.yaml:learning.enabled: learning is off for this package")
    if scope != "package" and scope not in pkg.functions:
        raise ValidationError(f"learning scope {scope!r}: must be 'package' or a function name"
                              f" ({', '.join(pkg.functions)})")
    if confidence not in ("high", "medium", "low"):
        raise ValidationError(f"learning confidence {confidence!r}: high, medium or low")
    for name, value in (("title", title), ("observation", observation),
                        ("correction", correction)):
        if not value.strip() or len(value) > 4000:
            raise ValidationError(f"learning {name}: 1 to 4000 characters")
    entry = _entry({"title": title, "observation": observation, "correction": correction,
                    "source": source, "confidence": confidence}, time.time())

    def command(tx: WriteTx) -> str:
        approval_id = ""
        if tier == "confirm":
            approval_id = c.request_approval(
                tx, kind=KIND, subject=f"expert:{pkg.name}",
                title=f"{pkg.name}: learning for {scope}: {title}"[:200],
                prompt=f"Persist this learning for {scope}?",
                context={"expert": pkg.name, "scope": scope}, preview=entry, actor=by,
                role=Role.APPROVER)
        tx.emit(NewEvent(entity_id=pkg.name, actor=by, role=Role.APPROVER.value,
                         payload=LearningProposed(
                             expert=pkg.name, scope=scope, title=title,
                             observation=observation, correction=correction, source=source,
                             confidence=confidence, tier=tier, approval_id=approval_id)))
        return approval_id

    approval_id = await store.execute(command)
    await project(store, pkg, workspace)
    return {"scope": scope, "tier": tier, "approval_id": approval_id or None}


async def proposed(store: Store, pkg: Package) -> list[dict[str, Any]]:
    """Every learning proposed for `pkg`, oldest first: its payload with `seq`, `ts` and
    `persisted` (auto tier, or approved; a manual one never is)."""
    rows = await store.fetchall(
        "SELECT e.seq, e.payload, e.ts, a.status FROM events e LEFT JOIN approvals a ON"
        " a.id = json_extract(e.payload, '$.approval_id') WHERE e.entity='expert' AND"
        " e.entity_id=? AND e.type='expert.learning_proposed' ORDER BY e.seq", (pkg.name,))
    out = []
    for row in rows:
        p = json.loads(row["payload"])
        out.append({**p, "seq": int(row["seq"]), "ts": float(row["ts"] or 0),
                    "persisted": p["tier"] == "auto" or (p["tier"] == "confirm"
                                                         and row["status"] == "approved")})
    return out


def current(learnings: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The persisted learnings the files keep (the newest `limit` per scope): those a
    function is given, and those an expert chat may recall (core/experts/memory.py)."""
    by_scope: dict[str, list[dict[str, Any]]] = {}
    for p in learnings:
        if p["persisted"]:
            by_scope.setdefault(p["scope"], []).append(p)
    return [p for entries in by_scope.values() for p in entries[-limit:]]


async def project(store: Store, pkg: Package, workspace: Path) -> dict[str, int]:
    """Rewrite the learnings files from the events (idempotent); entries per file."""
    _, _, limit = settings(pkg)
    kept: dict[str, list[str]] = {}
    drafts: list[str] = []
    for p in await proposed(store, pkg):
        entry = _entry(p, p["ts"])
        if p["tier"] == "manual":
            drafts.append(f"<!-- scope: {p['scope']} -->\n{entry}")
        elif p["persisted"]:
            kept.setdefault(p["scope"], []).append(entry)
    d = workspace / "learnings"
    d.mkdir(parents=True, exist_ok=True)
    counts = {}
    for scope, entries in kept.items():
        current, old = entries[-limit:], entries[:-limit]
        _write(d / _file_for(scope), f"---\nscope: {scope}\nentry_count: {len(current)}\n"
               "---\n\n" + "\n".join(current))
        if old:
            _write(d / "archive" / _file_for(scope), "\n".join(old))
        counts[scope] = len(current)
    if drafts:
        _write(d / "_drafts.md", "# Learning drafts (manual tier: not persisted)\n\n"
               + "\n".join(drafts))
    return counts


def _entry(p: dict[str, Any], ts: float) -> str:
    date = time.strftime("%Y-%m-%d", time.gmtime(ts))
    lines = [f"### {p['title']}", f"- **Date**: {date}"]
    if p.get("source"):
        lines.append(f"- **Source**: {p['source']}")
    lines += [f"- **Observation**: {p['observation']}", f"- **Correction**: {p['correction']}",
              f"- **Confidence**: {p['confidence']}", ""]
    return "\n".join(lines)


def _write(path: Path, text: str) -> None:
    files.write_if_changed(path, text)


def learnings_for(workspace: Path, function: str) -> str:
    """What a function's prompt is given: package-wide then its own learnings (bodies)."""
    out = []
    for name in ("_package.md", f"{function}.md"):
        p = workspace / "learnings" / name
        if p.is_file():
            text = p.read_text(encoding="utf-8")
            body = text.split("---\n", 2)[-1] if text.startswith("---\n") else text
            if body.strip():
                out.append(body.strip())
    return "\n\n".join(out)
