"""The expert's system prompt, assembled as the loader design's section 2 lays it out.

Persona and orchestrator go in whole (they are the expert's identity and routing brain);
functions, processes and knowledge only as an index (name + description), read on demand;
the approval tier of every declared tool operation is resolved (overrides, then the policy
default, then confirm) and spelled out per tier. `private` knowledge is left out of the index.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .package import Package
from .tiers import approval_tier


@dataclass(frozen=True)
class Part:
    title: str
    text: str


def resolved_tiers(pkg: Package) -> dict[str, list[str]]:
    """`tool.op` names per tier, for every operation the tools declare or overrides name."""
    tiers: dict[str, list[str]] = {"auto": [], "confirm": [], "manual": []}
    ops: list[tuple[str, str]] = []
    for tname in pkg.required_tools():
        tool = pkg.tools.get(tname)
        for op in (tool.operations() if tool else {}):
            ops.append((tname, op))
    ap = pkg.section("policy").get("approval")
    ov = ap.get("overrides") if isinstance(ap, dict) else None
    for key in ov if isinstance(ov, dict) else {}:
        t, _, o = str(key).partition(".")
        if o and (t, o) not in ops:
            ops.append((t, o))
    for t, o in ops:
        tiers[approval_tier(pkg, t, o)].append(f"{t}.{o}")
    return tiers


def default_tier(pkg: Package) -> str:
    ap = pkg.section("policy").get("approval")
    d = ap.get("default") if isinstance(ap, dict) else None
    return d if d in ("auto", "confirm", "manual") else "confirm"


def assemble(pkg: Package, workspace: str | Path = "{workspace}") -> list[Part]:
    """The prompt as titled parts (their concatenation is the prompt)."""
    parts: list[Part] = []
    for doc in pkg.persona:
        title = "Identity" if Path(doc.path).stem == "identity" else (
            "Rules" if Path(doc.path).stem == "rules" else f"Persona: {Path(doc.path).stem}")
        parts.append(Part(title, doc.body.strip()))
    parts.append(Part("How to Operate", pkg.orchestrator.strip()))
    fns = [f"- {n}: {d.description}" for n, d in pkg.functions.items()]
    parts.append(Part("Available Functions", "\n".join(fns) or "(none)"))
    procs = []
    for n, d in pkg.processes.items():
        trig = d.meta.get("trigger")
        procs.append(f"- {n}: {d.description}" + (f" (trigger: {trig})" if trig else ""))
    parts.append(Part("Available Processes", "\n".join(procs) or "(none)"))
    know = [f"- {Path(p).stem}: {d.description or _first_heading(d.body)}"
            for p, d in pkg.knowledge.items() if d.meta.get("type") != "private"]
    parts.append(Part("Knowledge Available", "\n".join(know) or "(none)"))
    states = [f"- {p} ({d.meta.get('scope', 'persistent')})" for p, d in pkg.state.items()]
    parts.append(Part("State Files", "\n".join(states) or "(none)"))
    parts.append(Part("Tool Approval Policy", _policy(pkg)))
    ws = str(workspace)
    parts.append(Part("Instructions", "\n".join([
        "When you need a function, read it from:", f"  {ws}/functions/{{name}}.md",
        "When you need knowledge, read it from:", f"  {ws}/knowledge/{{name}}.md",
        "State files are at:", f"  {ws}/state/{{name}}.md",
        "Scratch files go in:", f"  {ws}/scratch/",
        "Read and write them as instructed by functions and processes."])))
    return parts


def render(parts: list[Part]) -> str:
    return "\n\n".join(f"## {p.title}\n{p.text}" for p in parts) + "\n"


def _first_heading(body: str) -> str:
    for line in body.splitlines():
        if line.strip():
            return line.strip().lstrip("#").strip()
    return ""


def _policy(pkg: Package) -> str:
    tiers = resolved_tiers(pkg)
    d = default_tier(pkg)
    lines = ["Before calling any tool operation, check the approval tier:", ""]
    heads = {"auto": "AUTO (execute immediately):",
             "confirm": "CONFIRM (present action, wait for approval):",
             "manual": "MANUAL (draft only, never execute):"}
    for tier in ("auto", "confirm", "manual"):
        lines.append(heads[tier])
        lines.extend(f"- {op}" for op in tiers[tier])
        if tier == d:
            lines.append("Default for any unlisted operation.")
        if tier == "manual":
            lines.append("Deliver the completed draft and mark the step done.")
        lines.append("")
    ap = pkg.section("policy").get("approval")
    if isinstance(ap, dict) and isinstance(ap.get("timeout"), str):
        lines.append(f"A confirm request waits {ap['timeout']}; then: "
                     f"{ap.get('on_timeout', 'reject')}.")
    es = pkg.section("policy").get("escalation")
    if not isinstance(es, dict) or es.get("on_low_confidence", True) is True:
        lines.append("If your confidence in a decision is low, escalate to the main agent"
                     " with your reasoning and recommended action.")
    return "\n".join(lines).strip()
