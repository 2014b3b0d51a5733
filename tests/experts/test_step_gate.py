"""Issue 34 for compiled expert workflows: a step's `call` decides its tier where it runs
(`python -m clawtower.core.experts.step call`), from the installed package's policy and the
bindings, whatever the workflow file says: auto runs; confirm only after its approval step approved
it; manual never (a draft); an expert it cannot find, never. The compiled workflows hold
the same rule: every `call` of a non-auto operation sits behind an approval step. Against
the real sales MCP server, which logs what it executes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clawtower.core.experts import home
from clawtower.core.experts.bindings import bindings_path, load_bindings, write_binding
from clawtower.core.experts.package import load_package
from clawtower.core.experts.tiers import op_tier
from clawtower.core.workflows.load import load_workflow

from .test_run import SERVER, bind_radiant, calls

NAME = "radiant-sales-expert"
ROOT = Path(__file__).resolve().parents[2]


def step_call(op: str, inputs: dict[str, str], **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "EXPERT_BINDINGS": str(bindings_path(NAME)), "EXPERT_NAME": NAME,
            "EXPERT_OP": op, "EXPERT_TYPES": "{}", "EXPERT_WORKSPACE": str(home.workspace(NAME)),
            **{f"EXPERT_IN_{k}": v for k, v in inputs.items()}, **env}
    return subprocess.run([sys.executable, "-m", "clawtower.core.experts.step", "call"], env=full,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.fixture
def installed(tmp_path: Path, radiant: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path / "home"))
    home.install(str(radiant))
    log = tmp_path / "calls.jsonl"
    bind_radiant(NAME, log)
    return log


def test_a_step_call_decides_its_tier_where_it_runs(installed: Path) -> None:
    deal = {"deal_id": "d-7", "stage": "Closed Lost"}
    out = step_call("crm.update_deal_stage", deal)  # confirm, no approval step approved it
    assert out.returncode == 1 and "refused" in out.stderr and "confirm" in out.stderr
    out = step_call("crm.update_deal_stage", deal, EXPERT_APPROVED="false")
    assert out.returncode == 1
    out = step_call("email.send", {"to": "a@b.example", "body": "hi"}, EXPERT_APPROVED="true")
    assert out.returncode == 1 and "manual" in out.stderr  # never, approved or not
    out = step_call("crm.update_deal_stage", deal, EXPERT_NAME="no-such-expert")
    assert out.returncode == 1 and "refused" in out.stderr
    assert calls(installed) == []
    out = step_call("crm.update_deal_stage", deal, EXPERT_APPROVED="true")
    assert out.returncode == 0, out.stderr
    out = step_call("crm.create_note", {"contact_id": "c-1", "body": "n"})  # auto
    assert out.returncode == 0, out.stderr
    assert [c["tool"] for c in calls(installed)] == ["update_deal_stage", "create_note"]


def test_an_operation_bound_onto_a_stricter_tool_waits_for_approval(installed: Path) -> None:
    base: dict[str, Any] = {"type": "mcp", "command": sys.executable, "args": [str(SERVER)],
                            "env": {"SALES_MCP_CALLS": str(installed)}}
    write_binding(NAME, "crm", {**base, "operations": {"create_note": "update_deal_stage"}})
    out = step_call("crm.create_note", {"deal_id": "d-7", "stage": "Closed Lost"})
    assert out.returncode == 1 and "confirm" in out.stderr
    assert calls(installed) == []
    _every_call_is_gated()


def test_every_compiled_call_of_a_non_auto_operation_is_behind_an_approval(
        installed: Path) -> None:
    _every_call_is_gated()


def _every_call_is_gated() -> None:
    pkg = load_package(home.package_dir(NAME))
    bindings = load_bindings(bindings_path(NAME))
    seen = 0
    for path in home.compile_all(NAME):
        steps = load_workflow(path)["steps"]
        ids = {s["id"]: s for s in steps}
        for s in steps:
            cmd = str(s.get("command", ""))
            if not cmd.endswith(" call"):
                continue
            seen += 1
            tool, _, op = s["env"]["EXPERT_OP"].partition(".")
            tier = op_tier(pkg, bindings, tool, op)
            assert tier != "manual", (path, s["id"])
            if tier == "confirm":
                gate = s["condition"].removeprefix("$").removesuffix(".approved")
                assert ids[gate].get("approval"), (path, s["id"])
                assert s["env"]["EXPERT_APPROVED"] == s["condition"]
    assert seen > 0
