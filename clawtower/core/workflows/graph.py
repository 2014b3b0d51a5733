"""`workflow graph`: a workflow's steps and data flow as Mermaid (or DOT / ASCII), as Lobster
draws them: `next` edges in file order, plus `stdin`, `for_each` and `when:` edges."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .load import Workflow, is_approval_step, is_input_step, shell_command
from .refs import resolve_args_template

_REF = re.compile(r"\$([A-Za-z0-9_-]+)\.[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*")
FORMATS = ("mermaid", "dot", "ascii")


@dataclass(frozen=True)
class _Node:
    id: str
    type: str
    label: str
    diamond: bool
    details: str = ""


@dataclass(frozen=True)
class _Edge:
    src: str
    dst: str
    label: str


def _type(step: dict[str, Any]) -> str:
    if step.get("parallel"):
        return "parallel"
    if isinstance(step.get("for_each"), str):
        return "for_each"
    for kind in ("workflow", "pipeline"):
        v = step.get(kind)
        if isinstance(v, str) and v.strip():
            return kind
    if isinstance(step.get("run"), str) or isinstance(step.get("command"), str):
        return "run"
    if is_approval_step(step.get("approval")):
        return "approval"
    if is_input_step(step.get("input")):
        return "input"
    return "step"


def _details(step: dict[str, Any], args: dict[str, Any]) -> str:
    if step.get("parallel"):
        par = step["parallel"]
        wait = par.get("wait") if isinstance(par, dict) else None
        return f"parallel ({wait or 'all'})"
    if isinstance(step.get("for_each"), str):
        return f"for_each: {resolve_args_template(step['for_each'], args)}"
    for kind in ("workflow", "pipeline"):
        v = step.get(kind)
        if isinstance(v, str) and v.strip():
            return f"{kind}: {resolve_args_template(v, args)}"
    shell = shell_command(step)
    if isinstance(shell, str) and shell.strip():
        return f"run: {resolve_args_template(shell, args)}"
    if is_approval_step(step.get("approval")):
        return "approval gate"
    if is_input_step(step.get("input")):
        return "input request"
    return ""


def _refs(value: Any) -> list[str]:
    found: list[str] = []
    if isinstance(value, str):
        for m in _REF.finditer(value):
            if m.group(1) not in found:
                found.append(m.group(1))
    elif isinstance(value, (list, dict)):
        for v in (value.values() if isinstance(value, dict) else value):
            for r in _refs(v):
                if r not in found:
                    found.append(r)
    return found


def _truncate(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _collect(workflow: Workflow, args: dict[str, Any]) -> tuple[list[_Node], list[_Edge]]:
    nodes: list[_Node] = []
    edges: list[_Edge] = []
    known = {s["id"] for s in workflow["steps"]}
    seen: set[tuple[str, str, str]] = set()

    def add(src: str, dst: str, label: str) -> None:
        if (src, dst, label) not in seen:
            seen.add((src, dst, label))
            edges.append(_Edge(src, dst, label))

    prev: str | None = None
    for step in workflow["steps"]:
        sid = step["id"]
        details = _details(step, args)
        label = f"{sid}\\n{_truncate(details)}" if details else sid
        nodes.append(_Node(sid, _type(step), label, is_approval_step(step.get("approval")),
                           _truncate(details)))
        if prev:
            add(prev, sid, "next")
        prev = sid
        for r in _refs(step.get("stdin")):
            if r in known:
                add(r, sid, "stdin")
        if isinstance(step.get("for_each"), str):
            for r in _refs(step["for_each"]):
                if r in known:
                    add(r, sid, "for_each")
        cond = step.get("when")
        if cond is None:
            cond = step.get("condition")
        if isinstance(cond, str) and cond.strip():
            text = _truncate(f"when: {cond.strip()}", 70)
            for r in _refs(cond):
                if r in known:
                    add(r, sid, text)
    return nodes, edges


def _escape_mermaid(text: str) -> str:
    table = {"&": "&amp;", '"': "&quot;", "<": "&lt;", ">": "&gt;", "|": "&#124;"}
    return re.sub(r'[&"<>|]', lambda m: table[m.group(0)], text)


def _mermaid(nodes: list[_Node], edges: list[_Edge]) -> str:
    ids: dict[str, str] = {}
    used: set[str] = set()
    for n in nodes:
        base = re.sub(r"[^A-Za-z0-9_]", "_", n.id)
        key = base or "step"
        if re.match(r"\d", key):
            key = f"s_{key}"
        i = 2
        while key in used:
            key = f"{base}_{i}"
            i += 1
        used.add(key)
        ids[n.id] = key
    lines = ["flowchart TD"]
    for n in nodes:
        label = _escape_mermaid(n.label)
        lines.append(f'  {ids[n.id]}{{"{label}"}}' if n.diamond else f'  {ids[n.id]}["{label}"]')
    if nodes:
        lines.append("")
    for e in edges:
        if e.src in ids and e.dst in ids:
            lines.append(f"  {ids[e.src]} -->|{_escape_mermaid(e.label)}| {ids[e.dst]}"
                         if e.label else f"  {ids[e.src]} --> {ids[e.dst]}")
    return "\n".join(lines)


def _dot_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _dot(nodes: list[_Node], edges: list[_Edge]) -> str:
    lines = ["digraph workflow {", "  rankdir=TB;"]
    for n in nodes:
        shape = "diamond" if n.diamond else "box"
        lines.append(f'  "{_dot_escape(n.id)}" [shape={shape},label="{_dot_escape(n.label)}"];')
    if nodes:
        lines.append("")
    for e in edges:
        attr = f' [label="{_dot_escape(e.label)}"]' if e.label else ""
        lines.append(f'  "{_dot_escape(e.src)}" -> "{_dot_escape(e.dst)}"{attr};')
    lines.append("}")
    return "\n".join(lines)


def _flat(text: str) -> str:
    """One line of the ASCII layout: a line break inside a command or a condition is shown
    as `\\n`, so each node and edge stays on its own line."""
    return re.sub(r"\r\n|\r|\n", r"\\n", text)


def _ascii(nodes: list[_Node], edges: list[_Edge]) -> str:
    lines = ["Workflow Graph", "", "Nodes:"]
    for n in nodes:
        extra = f"({_flat(n.details)})" if n.details else ""
        lines.append(f"- {_flat(n.id)} [{n.type}] {extra}".strip())
    lines += ["", "Edges:"]
    lines += [f"- {_flat(e.src)} -> {_flat(e.dst)}" + (f" ({_flat(e.label)})" if e.label else "")
              for e in edges]
    if not edges:
        lines.append("- (none)")
    return "\n".join(lines)


def render_graph(workflow: Workflow, fmt: str = "mermaid",
                 args: dict[str, Any] | None = None) -> str:
    nodes, edges = _collect(workflow, args or {})
    if fmt == "dot":
        return _dot(nodes, edges)
    if fmt == "ascii":
        return _ascii(nodes, edges)
    return _mermaid(nodes, edges)
