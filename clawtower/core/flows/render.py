"""The seed's file layout, rendered from the store: a task as `task.md` (its DAG, progress
and results) and an agent's mailbox as one file per message. The store stays the source of
truth; these files are for people (and tools) that want the seed's workspace view.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..textsafe import safe
from .service import BOXES, Flows, mailbox_query

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def file_name(task_or_msg_id: str) -> str:
    """A task or message id as one path component (`F-1/root/b` -> `F-1--root--b`)."""
    return _SAFE.sub("-", task_or_msg_id.replace("/", "--")).strip("-") or "x"


def duration(t: dict[str, Any]) -> str:
    start = t.get("started_at") or t.get("dispatched_at")
    end = t.get("ended_at")
    if not start or not end:
        return "-"
    return f"{max(0.0, end - start):.2f}s"


def _cell(text: Any, n: int = 60) -> str:
    s = " ".join(str(text or "").split()).replace("|", "\\|")
    return s if len(s) <= n else s[: n - 1] + "…"


def task_md(flow: dict[str, Any], tasks: list[dict[str, Any]], task_id: str) -> str:
    """One task as the seed's task.md: header, instruction, context passed down, the sub-DAG
    it coordinates (with progress), each subtask's result, and its own result."""
    by_id = {t["task_id"]: t for t in tasks}
    t = by_id[task_id]
    kids = sorted((c for c in tasks if c["parent_id"] == task_id), key=lambda c: c["ord"])
    parent = by_id.get(t["parent_id"] or "")
    up = f"{parent['task_id']} ({parent['agent']})" if parent else "operator"
    lines = [f"# Task {task_id}", "",
             f"- **Flow:** {flow['id']} ({flow['status']})",
             f"- **Agent:** {t['agent']}",
             f"- **Parent:** {up}",
             f"- **Status:** {t['status']}" + (f" ({t['mode']})" if t["mode"] else ""),
             f"- **Depends on:** {', '.join(json.loads(t['depends_on'])) or '-'}",
             f"- **Duration:** {duration(t)} · **Tokens:** {t['tokens']}", "",
             "## Instruction", "", t["instruction"], ""]
    ctx = json.loads(t["context"]) if t["context"] else None
    if ctx:
        lines += ["## Context", "", "```json", json.dumps(ctx, indent=2, ensure_ascii=False),
                  "```", ""]
    if kids:
        done = sum(1 for c in kids if c["status"] == "done")
        lines += ["## DAG", "", "| id | agent | depends on | status | duration | tokens |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {c['local_id']} | {c['agent']} |"
                  f" {', '.join(json.loads(c['depends_on'])) or '-'} | {c['status']} |"
                  f" {duration(c)} | {c['tokens']} |" for c in kids]
        lines += ["", "## Progress", "", f"{done}/{len(kids)} subtasks done"
                  + "".join(f", {n} {s}" for s, n in _tally(kids).items() if s != "done"),
                  "", "## Results", ""]
        for c in kids:
            body = c["result"] if c["status"] == "done" else c["error"] or f"({c['status']})"
            lines += [f"### {c['local_id']} ({c['agent']}) — {c['status']}", "", str(body), ""]
    if t["status"] == "done":
        lines += ["## Synthesis" if kids else "## Result", "", str(t["result"]), ""]
    elif t["status"] == "failed":
        lines += ["## Error", "", str(t["error"]), ""]
    return "\n".join(lines)


def _tally(tasks: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tasks:
        out[t["status"]] = out.get(t["status"], 0) + 1
    return out


def message_md(m: dict[str, Any]) -> str:
    ctx = json.loads(m["context"]) if m.get("context") else {}
    head = {"message_id": m["msg_id"], "flow_id": m["flow_id"], "task_id": m["task_id"],
            "kind": m["kind"], "from": m["from_agent"], "to": m["to_agent"],
            "status": m["status"], "seq": m["seq"]}
    if m.get("reason"):
        head["ignored_because"] = m["reason"]
    lines = ["---"] + [f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in head.items()]
    if ctx:
        lines.append(f"context: {json.dumps(ctx, ensure_ascii=False, sort_keys=True)}")
    return "\n".join([*lines, "---", "", str(m["body"]), ""])


async def export(flows: Flows, flow_id: str, root: Path) -> list[Path]:
    """Write the flow as the seed's workspaces: `<root>/<agent>/tasks/<task>/task.md` for
    every task the agent handled and `<root>/<agent>/mailbox/<box>/<seq>-<kind>-<msg>.md`
    for its messages in this flow. Returns the files written."""
    got = await flows.get(flow_id)
    flow, tasks = got["flow"], got["tasks"]
    written: list[Path] = []
    agents = sorted({t["agent"] for t in tasks})
    for t in tasks:
        path = root / t["agent"] / "tasks" / file_name(t["task_id"]) / "task.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(safe(task_md(flow, tasks, t["task_id"])), encoding="utf-8")
        written.append(path)
    for agent in agents:
        for box in BOXES:
            d = root / agent / "mailbox" / box
            d.mkdir(parents=True, exist_ok=True)
            rows = await flows.store.fetchall(*mailbox_query(agent, box, flow_id, 10**9))
            for m in rows:
                p = d / f"{int(m['seq']):08d}-{m['kind']}-{file_name(m['msg_id'])}.md"
                p.write_text(safe(message_md(m)), encoding="utf-8")
                written.append(p)
    return written


__all__ = ["duration", "export", "file_name", "message_md", "task_md"]
