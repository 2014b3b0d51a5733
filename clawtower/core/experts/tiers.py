"""Approval tiers of an expert's operations: an operation's own (`approval_tier`: the
package's overrides, then its default, then confirm), and the tier of a bound operation,
which is the tier of the concrete tool it runs (issue 34.2).

A binding may map several declared operations onto one server tool (`operations:
{create_note: update_deal_stage}`): a call of that tool is then any of them, so its tier is
the STRICTEST of theirs (manual > confirm > auto), never the last one declared. The chat's
gate (core/experts/chat.py) and the compiled workflow's steps (core/experts/compile.py) both
take tiers from here; `expert bind` and `expert validate` print `shared_warnings`.
"""

from __future__ import annotations

from . import checks as ck
from .bindings import ToolBinding
from .package import Package

STRICTNESS = {"auto": 0, "confirm": 1, "manual": 2}


def approval_tier(pkg: Package, tool: str, op: str) -> str:
    """The effective tier of `tool.op`: overrides, then policy default, then confirm."""
    ap = pkg.section("policy").get("approval")
    if isinstance(ap, dict):
        ov = ap.get("overrides")
        if isinstance(ov, dict) and ov.get(f"{tool}.{op}") in ck.TIERS:
            return str(ov[f"{tool}.{op}"])
        if ap.get("default") in ck.TIERS:
            return str(ap["default"])
    return "confirm"


def strictest(tiers: list[str]) -> str:
    """The strictest of `tiers`; an unknown tier counts as manual (never run)."""
    return max(tiers, key=lambda t: STRICTNESS.get(t, len(STRICTNESS)), default="confirm")


def concrete_ops(pkg: Package, bindings: dict[str, ToolBinding]
                 ) -> dict[str, list[tuple[str, str]]]:
    """`<tool>.<concrete tool>` -> the declared (tool, operation) pairs that run it, for every
    bound tool (an unbound one is skipped: nothing can run it)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for tool, decl in pkg.tools.items():
        b = bindings.get(tool)
        if b is None:
            continue
        for op in decl.operations():
            out.setdefault(f"{tool}.{b.op(op).tool}", []).append((tool, op))
    return out


def concrete_tiers(pkg: Package, bindings: dict[str, ToolBinding]) -> dict[str, str]:
    """`<tool>.<concrete tool>` -> its tier: the strictest over the operations that run it."""
    return {name: strictest([approval_tier(pkg, t, o) for t, o in ops])
            for name, ops in concrete_ops(pkg, bindings).items()}


def op_tier(pkg: Package, bindings: dict[str, ToolBinding], tool: str, op: str) -> str:
    """The tier a call of declared `tool.op` runs at: its concrete tool's (see module)."""
    b = bindings.get(tool)
    if b is None:
        return approval_tier(pkg, tool, op)
    return concrete_tiers(pkg, bindings).get(f"{tool}.{b.op(op).tool}",
                                             approval_tier(pkg, tool, op))


def shared_warnings(pkg: Package, bindings: dict[str, ToolBinding]) -> list[str]:
    """One line per concrete tool that several operations run, naming them and its tier."""
    out: list[str] = []
    tiers = concrete_tiers(pkg, bindings)
    for name, ops in concrete_ops(pkg, bindings).items():
        if len(ops) < 2:
            continue
        names = [f"{t}.{o} ({approval_tier(pkg, t, o)})" for t, o in ops]
        verb = "both run" if len(names) == 2 else "all run"
        out.append(f"bindings.yaml:tools.{ops[0][0]}.operations: {' and '.join(names)}"
                   f" {verb} {name}; its tier is {tiers[name]} (the strictest)")
    return out


__all__ = ["approval_tier", "concrete_ops", "concrete_tiers", "op_tier", "shared_warnings",
           "strictest"]
