"""Requirement 9: core never imports the console, the CLI or textual.

rich is allowed: httpx, a core dependency, imports it for its own command line."""

from __future__ import annotations

import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from procs import ROOT, child_env

import core

FORBIDDEN = ("textual", "tui", "cli")


def core_modules() -> list[str]:
    return ["core", *sorted(m.name for m in pkgutil.walk_packages(core.__path__, "core."))]


def test_every_core_module_is_listed():
    mods = core_modules()
    for expected in ("core.orchestrator", "core.engine", "core.store.sqlite",
                     "core.tasks.commands", "core.agents.simulator", "core.safe_yaml"):
        assert expected in mods


def test_importing_all_of_core_loads_no_console_modules():
    code = (
        "import importlib, sys\n"
        f"for m in {core_modules()!r}:\n"
        "    importlib.import_module(m)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(len(sys.modules), bad)\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=child_env(), cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_import_linter_contract_holds():
    exe = Path(sys.executable).parent / "lint-imports"
    lint = str(exe) if exe.exists() else shutil.which("lint-imports")
    if lint is None:
        pytest.skip("import-linter is not installed")
    out = subprocess.run([lint, "--no-cache"], capture_output=True, text=True, cwd=ROOT,
                         env={**child_env(), "PYTHONPATH": str(ROOT)}, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout, out.stdout
    assert "core never imports the console" in out.stdout
