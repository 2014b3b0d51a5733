"""What a compiled expert workflow's steps execute: `python -m clawtower.core.experts.step ACTION`.

The compiled `.lobster` file passes everything through its environment (templated by the
runner from args and earlier steps' results):
  EXPERT_BINDINGS   the bindings file      EXPERT_WORKSPACE  the runtime workspace
  EXPERT_TYPES      {input name: type}     EXPERT_IN_<name>  one input value each
  EXPERT_OP         tool.operation         EXPERT_STEP       the checklist line
  EXPERT_SCRATCH    the run's scratchpad (relative to the workspace), if the process has one

Actions: `call` runs a bound operation on its MCP server and prints its result as JSON,
after deciding its tier itself (an auto-tier operation, or a confirm-tier one its approval
step approved: `_gate`; anything else is refused);
`preview` prints a confirm-tier operation's proposed input (the approval gate shows it);
`draft` prints a manual-tier operation as a draft, never executing it; `gather` prints the
inputs (an llm-task step's input); `state` reports a note for a state file (recorded as an
event, the file rebuilt from the events: core/experts/state.py); `finish` prints the
process outputs and removes the scratchpad. Exit 1 with one line on stderr on failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _inputs() -> dict[str, Any]:
    types = json.loads(os.environ.get("EXPERT_TYPES") or "{}")
    out: dict[str, Any] = {}
    for key, raw in os.environ.items():
        if not key.startswith("EXPERT_IN_"):
            continue
        name = key[len("EXPERT_IN_"):]
        if types.get(name, "string") == "string":
            out[name] = raw
            continue
        try:
            out[name] = json.loads(raw)
        except ValueError:
            out[name] = raw
    return dict(sorted(out.items()))


def _workspace() -> Path:
    return Path(os.environ["EXPERT_WORKSPACE"])


def _scratch_path() -> Path | None:
    """The run's scratchpad, which must stay under the workspace's scratch/ (its name is
    built from run inputs: `../` in an input must not reach any other file)."""
    rel = os.environ.get("EXPERT_SCRATCH")
    if not rel:
        return None
    root = (_workspace() / "scratch").resolve()
    p = (_workspace() / rel).resolve()
    if root not in p.parents:
        raise ValueError(f"scratchpad {rel!r} is outside {root}")
    return p


def _scratch(line: str) -> None:
    p = _scratch_path()
    if p is None:
        return
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a", encoding="utf-8") as f:
        f.write(line.rstrip() + "\n")


def _record(result: Any) -> None:
    step = os.environ.get("EXPERT_STEP", "")
    _scratch(f"- [x] {step}\n  - result: {json.dumps(result, ensure_ascii=False)[:2000]}")


def _gate(tool: str, op: str, bindings: dict[str, Any]) -> None:
    """The approval gate where the call runs (issue 34), whatever the workflow file says:
    the tier of the concrete tool `tool.op` runs, from the installed package's policy (the
    strictest of the operations bound onto it: tiers.py). `auto` runs; `confirm` only after
    the workflow's approval step approved it (EXPERT_APPROVED, templated from that step's
    `approved`); `manual`, or a tier that cannot be decided, never."""
    from .package import load_package
    from .tiers import op_tier

    name = os.environ.get("EXPERT_NAME", "")
    root = Path(os.environ["EXPERT_BINDINGS"]).parents[2] / "experts"  # $CLAWTOWER_HOME's
    pkg_dir = root / name
    if not name or "/" in name or name.startswith(".") \
            or not (pkg_dir / "expert.yaml").is_file():
        raise RuntimeError(f"{tool}.{op}: refused: no installed expert {name!r} to decide its"
                           " approval tier from; the call was not made")
    tier = op_tier(load_package(pkg_dir), bindings, tool, op)
    if tier == "auto" or (tier == "confirm" and os.environ.get("EXPERT_APPROVED") == "true"):
        return
    why = ("it was not approved" if tier == "confirm" else "a manual-tier operation is only"
           " ever drafted" if tier == "manual" else "its tier cannot be decided")
    raise RuntimeError(f"{tool}.{op}: refused: its approval tier is {tier} and {why}; the"
                       " call was not made")


async def _call() -> Any:
    from ..tools.mcp import McpServer
    from .bindings import load_bindings

    tool, _, op = os.environ["EXPERT_OP"].partition(".")
    bindings = load_bindings(os.environ["EXPERT_BINDINGS"])
    b = bindings.get(tool)
    if b is None or b.server is None:
        raise RuntimeError(f"tool {tool!r} is not bound to an MCP server"
                           f" ({os.environ['EXPERT_BINDINGS']})")
    _gate(tool, op, bindings)
    ob = b.op(op)
    args = {ob.args.get(k, k): v for k, v in _inputs().items()}
    server = McpServer(b.server)
    try:
        res = await server.call_tool(ob.tool, args)
    finally:
        await server.aclose()
    if res.is_error:
        raise RuntimeError(f"{tool}.{op} ({b.server.name}.{ob.tool}) failed: {res.content}")
    if res.structured is not None:
        return res.structured
    try:
        return json.loads(res.content)
    except ValueError:
        return {"text": res.content}


def main(argv: list[str]) -> int:
    action = argv[0] if argv else ""
    try:
        if action == "call":
            out: Any = asyncio.run(_call())
            _record(out)
        elif action == "preview":
            out = {"operation": os.environ["EXPERT_OP"], "input": _inputs()}
        elif action == "draft":
            out = {"draft": True, "operation": os.environ["EXPERT_OP"], "input": _inputs(),
                   "note": "manual tier: delivered for a human to carry out; not executed"}
            _record(out)
        elif action == "gather":
            out = _inputs()
            _scratch(f"- [x] {os.environ.get('EXPERT_STEP', '')} (inputs gathered)")
        elif action == "state":
            rel = os.environ["EXPERT_STATE_FILE"]
            p = (_workspace() / rel).resolve()
            if (_workspace() / "state").resolve() not in p.parents:
                raise ValueError(f"state file {rel!r} is outside the workspace's state/")
            note = os.environ.get("EXPERT_IN_" + "notes", "").strip()
            stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
            # the note goes into the file as an event (core/experts/state.py), from this
            # step's recorded result; nothing is written to the file here
            out = {"state": rel, "appended": note, "at": stamp}
            _record(out)
        elif action == "finish":
            out = {"outputs": _inputs()}
            scratch = _scratch_path()
            if scratch is not None:
                scratch.unlink(missing_ok=True)
        else:
            sys.stderr.write(f"clawtower.core.experts.step: unknown action {action!r}\n")
            return 2
    except Exception as exc:  # one line, never a traceback: the run records it
        sys.stderr.write(f"{action}: {exc}\n")
        return 1
    sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
