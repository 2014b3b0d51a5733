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
    # the console's and the CLI's layering (pyproject.toml): screens never import the app,
    # command modules never import cli.main
    assert "screens, lists and commands never import the app" in out.stdout
    assert "CLI command modules never import cli.main" in out.stdout
    # the governed turn: only the turn loop and the named exceptions call a model directly
    assert "only the turn loop and the named exceptions call a model directly" in out.stdout


# ----------------------------------------------------------------- lazy imports (start-up)
# `import core` and `import cli.main` load no engine, store, model or schema library: every
# CLI command imports what it needs in its handler. Behavioural checks on sys.modules only;
# the timings live in benchmarks/ (BENCHMARKS.md, start-up).

NOT_AT_IMPORT = (
    "jsonschema", "httpx", "mcp", "textual", "tui", "pydantic", "aiosqlite", "yaml",
    "core.engine", "core.orchestrator", "core.meetings.coordinator", "core.meetings.service",
    "core.store", "core.events", "core.approvals", "core.tasks.service",
    "core.workflows.service", "core.workflows.ajv", "core.workflows.dryrun",
    "core.agents.provider", "core.agents.simulator", "core.agents.config",
    "core.agents.llm_task", "core.tools.registry",
)


def _child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=child_env(), cwd=ROOT, timeout=120)


def _loaded(mods: tuple[str, ...]) -> str:
    """Code printing which of `mods` (or their submodules) are in sys.modules."""
    return (f"mods = {mods!r}\n"
            "print(sorted(m for m in sys.modules if any(m == x or m.startswith(x + '.')"
            " for x in mods)))\n")


def test_importing_core_and_the_cli_loads_no_heavy_module():
    out = _child("import sys\nimport core\nimport cli.main\n" + _loaded(NOT_AT_IMPORT))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_cli_help_loads_no_heavy_module():
    code = ("import sys\nfrom cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            + _loaded((*NOT_AT_IMPORT, "asyncio")))
    out = _child(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-2000:]


def test_workflow_run_loads_only_what_it_needs(tmp_path):
    wf = tmp_path / "q.lobster"
    wf.write_text("name: q\nsteps:\n  - id: a\n    run: echo hi\n", encoding="utf-8")
    needless = ("jsonschema", "httpx", "mcp", "textual", "tui", "core.engine",
                "core.orchestrator", "core.meetings.coordinator", "core.meetings.service",
                "core.workflows.ajv", "core.workflows.dryrun", "core.agents.config",
                "core.agents.llm_task", "core.agents.provider", "core.tools")
    code = ("import contextlib, io, sys\nfrom cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as buf:\n"
            f"    rc = main(['workflow', 'run', '--file', {str(wf)!r},"
            f" '--db', {str(tmp_path / 's.db')!r}])\n"
            "assert rc == 0 and '\"ok\": true' in buf.getvalue(), (rc, buf.getvalue())\n"
            + _loaded(needless))
    out = _child(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_every_lazy_name_of_core_is_its_module_s_object():
    code = (
        "import importlib, core\n"
        "assert sorted(core.__all__) == sorted(core._EXPORTS), 'core.__all__ != _EXPORTS'\n"
        "for name, mod in core._EXPORTS.items():\n"
        "    obj = getattr(importlib.import_module(mod, 'core'), name)\n"
        "    assert getattr(core, name) is obj, name\n"
        "from core import *\n"
        "assert set(core.__all__) <= set(dir(core))\n"
        "try:\n    core.NoSuchName\nexcept AttributeError:\n    pass\n"
        "else:\n    raise AssertionError('core.NoSuchName resolved')\n"
        "import cli.workflow, core.workflows.graph\n"
        "assert cli.workflow.GRAPH_FORMATS == core.workflows.graph.FORMATS\n"
    )
    out = _child(code)
    assert out.returncode == 0, out.stdout + out.stderr


def test_opening_the_store_registers_every_event_type():
    """Stored events decode whatever command runs: the store module loads every payload
    class (core.events, and the meeting events through core.store's meeting projections)."""
    code = (
        "import core.store, core.events\n"
        "types = set(core.events.registered_types())\n"
        "import pkgutil, importlib, core\n"
        "for m in pkgutil.walk_packages(core.__path__, 'core.'):\n"
        "    importlib.import_module(m.name)\n"
        "missing = set(core.events.registered_types()) - types\n"
        "assert not missing, missing\n"
        "assert any(t.startswith('meeting.') for t in types), types\n"
    )
    out = _child(code)
    assert out.returncode == 0, out.stdout + out.stderr
