"""The compiled steps' command confines what run inputs can reach: a scratchpad name built
from an input with `../` never writes or deletes outside the workspace's scratch/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def step(action: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clawtower.core.experts.step", action],
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])


def test_scratchpad_stays_in_scratch(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    victim = tmp_path / "victim.md"
    victim.write_text("keep me\n")
    base = {"EXPERT_WORKSPACE": str(ws), "EXPERT_STEP": "step one", "EXPERT_TYPES": "{}"}
    ok = step("gather", {**base, "EXPERT_SCRATCH": "scratch/triage-m1.md"})
    assert ok.returncode == 0, ok.stderr
    assert "- [x] step one" in (ws / "scratch" / "triage-m1.md").read_text()
    for action in ("gather", "finish"):
        bad = step(action, {**base, "EXPERT_SCRATCH": "scratch/triage-../../../../victim.md"})
        assert bad.returncode == 1
        assert "outside" in bad.stderr and "Traceback" not in bad.stderr
    assert victim.read_text() == "keep me\n"
    done = step("finish", {**base, "EXPERT_SCRATCH": "scratch/triage-m1.md"})
    assert done.returncode == 0 and not (ws / "scratch" / "triage-m1.md").exists()


def test_state_step_stays_in_state(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "state").mkdir(parents=True)
    bad = step("state", {"EXPERT_WORKSPACE": str(ws), "EXPERT_STATE_FILE": "../x.md",
                         "EXPERT_IN_notes": "n"})
    assert bad.returncode == 1 and not (tmp_path / "x.md").exists()
