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

from clawtower import core

FORBIDDEN = ("textual", "clawtower.tui", "clawtower.cli")


def core_modules() -> list[str]:
    return ["clawtower.core",
            *sorted(m.name for m in pkgutil.walk_packages(core.__path__, "clawtower.core."))]


def test_every_core_module_is_listed():
    mods = core_modules()
    for expected in ("orchestrator", "engine", "store.sqlite", "tasks.commands",
                     "agents.simulator", "safe_yaml"):
        expected = f"clawtower.core.{expected}"
        assert expected in mods


def test_importing_all_of_core_loads_no_console_modules():
    code = (
        "import importlib, sys\n"
        f"for m in {core_modules()!r}:\n"
        "    importlib.import_module(m)\n"
        f"bad = sorted(m for m in sys.modules if any(m == f or m.startswith(f + '.')"
        f" for f in {FORBIDDEN!r}))\n"
        "print(len(sys.modules), bad)\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=child_env(), cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def _module_graph(root: Path, base: Path | None = None) -> dict[str, set[str]]:
    """Module -> the core modules it imports, from every import statement in the file: at
    the top, in a function, under TYPE_CHECKING (`from . import x` is an edge to package.x,
    an import of a package an edge to its __init__). Names are relative to `base`
    (the folder holding the import root; root's parent by default)."""
    import ast

    mods = {".".join(p.relative_to(base or root.parent).with_suffix("").parts).removesuffix(
        ".__init__"): p for p in root.rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    parts = pkg.split(".")
                    base = ".".join(parts[:len(parts) - (n.level - 1)] + ([base] if base else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                         for a in n.names]
            edges[m].update(t for t in names if t in mods and t != m)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_core_has_no_import_cycle():
    """Issue 35: no two modules of core import each other, directly or around a loop, by any
    import (a function-level or TYPE_CHECKING one included: they still cannot be understood
    apart). A lower module that needs a higher one's behaviour is passed it."""
    found = _cycles(_module_graph(ROOT / "clawtower" / "core", ROOT))
    assert not found, "import cycles in core/:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_cycle(tmp_path):
    pkg = tmp_path / "core"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "sub" / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n", encoding="utf-8")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import a\n",
        encoding="utf-8")
    (pkg / "c.py").write_text("from . import a\n", encoding="utf-8")
    edges = _module_graph(pkg)
    assert edges["core.a"] == {"core.sub.b"} and edges["core.sub.b"] == {"core.a"}
    assert _cycles(edges) == [["core.a", "core.sub.b"]]


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
    # issue 35: the engine composes the protocols' workers; none of them climbs back to it
    assert "protocol workers never import the engine that composes them" in out.stdout
    # the governed turn: only the turn loop and the named exceptions call a model directly
    assert "only the turn loop and the named exceptions call a model directly" in out.stdout
    # issue 35: the memory and session packages are layered (no cycle, lower never higher)
    assert "core.memory is layered" in out.stdout
    assert "core.sessions is layered" in out.stdout


# ----------------------------------------------------------------- lazy imports (start-up)
# `import core` and `import cli.main` load no engine, store, model or schema library: every
# CLI command imports what it needs in its handler. Behavioural checks on sys.modules only;
# the timings live in benchmarks/ (BENCHMARKS.md, start-up).

def ours(*mods: str) -> tuple[str, ...]:
    """Our modules, by their names under the one import root (`clawtower.`)."""
    return tuple(f"clawtower.{m}" for m in mods)


NOT_AT_IMPORT = ("jsonschema", "httpx", "mcp", "textual", "pydantic", "aiosqlite", "yaml",
                 *ours("tui", "core.engine", "core.orchestrator",
                       "core.meetings.coordinator", "core.meetings.service", "core.store",
                       "core.events", "core.approvals", "core.tasks.service",
                       "core.workflows.service", "core.workflows.ajv",
                       "core.workflows.dryrun", "core.agents.provider",
                       "core.agents.simulator", "core.agents.config",
                       "core.agents.llm_task", "core.tools.registry"))


def _child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=child_env(), cwd=ROOT, timeout=120)


def _loaded(mods: tuple[str, ...]) -> str:
    """Code printing which of `mods` (or their submodules) are in sys.modules."""
    return (f"mods = {mods!r}\n"
            "print(sorted(m for m in sys.modules if any(m == x or m.startswith(x + '.')"
            " for x in mods)))\n")


def test_importing_core_and_the_cli_loads_no_heavy_module():
    out = _child("import sys\nimport clawtower.core\nimport clawtower.cli.main\n"
                 + _loaded(NOT_AT_IMPORT))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_cli_help_loads_no_heavy_module():
    code = ("import sys\nfrom clawtower.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            + _loaded((*NOT_AT_IMPORT, "asyncio")))
    out = _child(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-2000:]


def test_the_console_paints_before_the_engine_and_the_models_load():
    """What the console's first paint waits on (issue 39: <= 0.6 s, bench_console_startup.py):
    the app module, the first mode, the package's themes and the console's parser load no
    event model, schema library, engine, service or other mode; those load behind the frame."""
    needless = ("pydantic", "jsonschema", "httpx", "mcp", "markdown_it",
                *ours("core.events", "core.engine", "core.orchestrator", "core.workers",
                      "core.meetings", "core.tasks.service", "core.workflows.service",
                      "core.agents.simulator", "core.agents.provider", "core.agents.config",
                      "tui.screens.approvals", "tui.screens.flows", "tui.screens.sessions",
                      "tui.screens.task_detail", "tui.themefile", "cli.task", "cli.flow"))
    code = ("import sys\nfrom clawtower.cli.main import build_parser\n"
            "build_parser([]).parse_args([])\n"
            "from clawtower.tui.app import ClawtowerApp\n"
            "app = ClawtowerApp('unused.db', run_engine=False, operator='o')\n"
            "assert app.theme == 'clawtower-dark', app.theme\n"
            "assert app.current_theme.name == 'clawtower-dark'\n"
            + _loaded(needless))
    out = _child(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_workflow_run_loads_only_what_it_needs(tmp_path):
    wf = tmp_path / "q.lobster"
    wf.write_text("name: q\nsteps:\n  - id: a\n    run: echo hi\n", encoding="utf-8")
    needless = ("jsonschema", "httpx", "mcp", "textual",
                *ours("tui", "core.engine", "core.orchestrator",
                      "core.meetings.coordinator", "core.meetings.service",
                      "core.workflows.ajv", "core.workflows.dryrun", "core.agents.config",
                      "core.agents.llm_task", "core.agents.provider", "core.tools"))
    code = ("import contextlib, io, sys\nfrom clawtower.cli.main import main\n"
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
        "import importlib\nfrom clawtower import core\n"
        "assert sorted(core.__all__) == sorted(core._EXPORTS), 'core.__all__ != _EXPORTS'\n"
        "for name, mod in core._EXPORTS.items():\n"
        "    obj = getattr(importlib.import_module(mod, 'clawtower.core'), name)\n"
        "    assert getattr(core, name) is obj, name\n"
        "from clawtower.core import *\n"
        "assert set(core.__all__) <= set(dir(core))\n"
        "try:\n    core.NoSuchName\nexcept AttributeError:\n    pass\n"
        "else:\n    raise AssertionError('core.NoSuchName resolved')\n"
        "from clawtower.cli import workflow\nfrom clawtower.core.workflows import graph\n"
        "assert workflow.GRAPH_FORMATS == graph.FORMATS\n"
    )
    out = _child(code)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_event_type_and_projection_loads_on_first_use():
    """Stored events decode and replay whatever command runs, though opening a store loads
    no payload model: the first decode loads every payload module (core.events.
    PAYLOAD_MODULES), the first applied event every projection (PROJECTION_MODULES). Both
    lists must name every module that defines one: checked against all of core."""
    code = (
        "import sys\nimport clawtower.core.store\n"
        "assert 'clawtower.core.events' not in sys.modules and 'pydantic' not in sys.modules\n"
        "import clawtower.core.events as ev, clawtower.core.store.handlers as pr\n"
        "assert ev.payload_class('meeting.started').TYPE == 'meeting.started'\n"
        "types = set(ev.registered_types())\n"
        "pr.load_all()\n"
        "handlers = {k: len(v) for k, v in pr._HANDLERS.items()}\n"
        "import pkgutil, importlib\nfrom clawtower import core\n"
        "for m in pkgutil.walk_packages(core.__path__, 'clawtower.core.'):\n"
        "    importlib.import_module(m.name)\n"
        "missing = set(ev.registered_types()) - types\n"
        "assert not missing, ('add their modules to core.events.PAYLOAD_MODULES', missing)\n"
        "after = {k: len(v) for k, v in pr._HANDLERS.items()}\n"
        "assert after == handlers, ('add to store.handlers.PROJECTION_MODULES',\n"
        "    {k: v for k, v in after.items() if handlers.get(k) != v})\n"
        "assert any(t.startswith('meeting.') for t in types), types\n"
        "try:\n    ev.decode('nope.nope', '{}')\n"
        "except Exception as exc:\n    assert 'unknown event type' in str(exc), exc\n"
        "else:\n    raise AssertionError('an unknown type decoded')\n"
    )
    out = _child(code)
    assert out.returncode == 0, out.stdout + out.stderr


def test_an_event_type_loads_only_the_modules_of_its_word_and_they_are_all_it_needs():
    """The first decode of a type loads the payload module its first word names
    (`events.PAYLOAD_MODULE_OF`), the first apply the projection modules that word names
    (`store.handlers.PROJECTORS_OF`). Checked against every type and handler of core: each
    type's payload is in its word's module, each handler's module is among its word's, and
    the handlers of a type run in the order of `PROJECTION_MODULES` however the modules were
    loaded (that of a load of all). And a workflow's events load no other protocol's."""
    code = (
        "import sys, importlib, pkgutil\n"
        "import clawtower.core.events as ev, clawtower.core.store.handlers as pr\n"
        "assert ev.payload_class('workflow.started').TYPE == 'workflow.started'\n"
        "pr._handlers_of('workflow.started'); pr._handlers_of('approval.decided')\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('clawtower.core.') and\n"
        "                m.endswith(('.events', '.projections')))\n"
        "assert loaded == ['clawtower.core.events', 'clawtower.core.store.projections',\n"
        "    'clawtower.core.workflows.events', 'clawtower.core.workflows.projections'], loaded\n"
        "pr._handlers_of('turnjob.started')  # the sessions' projections load first\n"
        "lazy = pr._handlers_of('session.created')\n"
        "assert [h.__module__ for h in lazy] == ['clawtower.core.flows.projections',\n"
        "    'clawtower.core.sessions.projections'], lazy  # the order of a load of all\n"
        "from clawtower import core\n"
        "for m in pkgutil.walk_packages(core.__path__, 'clawtower.core.'):\n"
        "    importlib.import_module(m.name)\n"
        "for t in ev.registered_types():\n"
        "    word = t.split('.', 1)[0]\n"
        "    mod = ev.payload_class(t).__module__\n"
        "    assert ev.PAYLOAD_MODULE_OF.get(word, 'clawtower.core.events') == mod, (t, mod)\n"
        "    if word == 'store':\n"
        "        assert word not in pr.PROJECTORS_OF  # its repairs: every module's\n"
        "        continue\n"
        "    own = {f'clawtower.core.{m}.projections' for m in pr.PROJECTORS_OF[word]}\n"
        "    for h in pr._HANDLERS.get(t, []):\n"
        "        assert h.__module__ in own | {pr.CORE}, (t, h.__module__, own)\n"
        "assert pr._handlers_of('session.created') == lazy\n"
        "print('ok')\n"
    )
    out = _child(code)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


# ------------------------------------------------------------- cold start of read commands
# A read command opens the store and reads projection tables: it builds no pydantic model
# (no payload, spec or config model), loads no console, HTTP client, MCP SDK or YAML parser,
# and imports no other command group's module. (Timings: benchmarks/bench_startup.py.)

READ_NEEDLESS = ("pydantic", "yaml", "textual", "httpx", "mcp", "jsonschema",
                 *ours("core.events", "tui", "core.tasks.commands", "core.tasks.spec",
                       "core.sessions.service", "core.sessions.events", "core.engine",
                       "core.orchestrator", "core.agents", "core.tools", "core.workflows",
                       "core.meetings.coordinator", "core.leases", "cli.demo", "cli.serve",
                       "cli.workflow", "cli.expert", "cli.acp", "cli.flow", "cli.triggers",
                       "core.flows.service", "core.flows.projections", "core.triggers.queue",
                       "core.triggers.catalog", "core.triggers.cron", "core.experts",
                       "core.memory.hybrid", "core.memory.config", "core.memory.embeddings"))
# a command's own modules (a group's read side) are not another command's: `workflow list`
# reads the runs' projection (core.workflows.reads) without the service, loader or runner
OWN = {"workflow": (ours("cli.workflow", "core.workflows"),
                    ours("core.workflows.service", "core.workflows.load",
                         "core.workflows.cost", "core.workflows.runner",
                         "core.workflows.adoption", "core.workflows.pipeline")),
       "flow": (ours("cli.flow"), ()), "triggers": (ours("cli.triggers"), ())}


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One task, one session (S-1) and one pending approval, written through the CLI."""
    d = tmp_path_factory.mktemp("cold")
    db = d / "s.db"
    spec = next((ROOT / "examples" / "demo" / "specs").glob("01-*.yaml"))
    code = (
        "import contextlib, io, sys\nfrom clawtower.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main(['task', 'create', {str(spec)!r}, '--db', {str(db)!r}]) == 0\n"
        f"    assert main(['session', 'new', '--title', 't', '--db', {str(db)!r}]) == 0\n"
        "import asyncio\nimport clawtower.core.events as ev\n"
        "from clawtower.core import store as cs\nfrom clawtower.core.events import NewEvent\n"
        "async def ask():\n"
        f"    s = await cs.open_store({str(db)!r})\n"
        "    await s.append([NewEvent(entity_id='a1', actor='t', role='operator',\n"
        "        payload=ev.ApprovalRequested(kind='task_side_effect', subject='T-1',\n"
        "                                     title='x', prompt='y'))])\n"
        "    await s.close()\n"
        "asyncio.run(ask())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**child_env(), "CLAWTOWER_HOME": str(d / "home")}, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return db


@pytest.mark.parametrize("argv, shows", [
    (["approvals"], "a1"), (["task", "list"], "T-1"), (["task", "show", "T-1"], "T-1"),
    (["session", "show", "S-1"], "S-1: t"), (["meeting", "list"], "no meetings"),
    (["memory", "list"], "no memories"), (["session", "list"], "S-1"),
    # issue 39: these four loaded the flow service, the workflow engine, the expert packages'
    # parser and the config models (to say that no embedding provider is configured)
    (["flow", "list"], "no flows"), (["workflow", "list"], "no workflow runs"),
    (["triggers", "list"], "no triggers"),
    (["memory", "search", "agent:coder", "words"], "no embedding provider configured"),
])
def test_a_read_command_loads_no_model_and_no_other_command(small_store, argv, shows):
    own, heavy = OWN.get(argv[0], ((), ()))
    needless = tuple(m for m in READ_NEEDLESS if m not in own) + heavy
    home = small_store.parent / "read-home"  # no config file: the built-in cast
    code = ("import contextlib, io, os, sys\nfrom clawtower.cli.main import main\n"
            f"os.environ['CLAWTOWER_HOME'] = {str(home)!r}\n"
            "os.environ.pop('CLAWTOWER_CONFIG', None)\n"
            "with contextlib.redirect_stdout(io.StringIO()) as buf:\n"
            f"    rc = main({[*argv, '--db', str(small_store)]!r})\n"
            f"assert rc == 0 and {shows!r} in buf.getvalue(), (rc, buf.getvalue())\n"
            + _loaded(needless))
    out = _child(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_the_command_table_names_what_each_group_registers():
    """clawtower.cli.main builds only the parser of the command it runs (COMMANDS): the table must
    name every command of every group, and help still lists them all."""
    import argparse

    from clawtower.cli import main as cli_main

    registered = {}
    for name in cli_main.GROUPS:
        sub = argparse.ArgumentParser().add_subparsers()
        cli_main.group(name).register(sub)
        registered.update({command: name for command in sub.choices})
    assert registered == cli_main.COMMANDS
    assert cli_main._groups_for(["task", "list"]) == ("task",)
    # a top-level option's value is not the command, even when it is spelled like one
    assert cli_main._groups_for(["--db", "task", "approvals"]) == ("approvals",)
    assert cli_main._groups_for(["--db=serve", "session", "list"]) == ("session",)
    for argv in (None, ["--help"], ["-h", "task"], ["nosuch"], ["--db", "x", "nosuch"]):
        assert cli_main._groups_for(argv) == cli_main.GROUPS, argv
    # no command is the console: its parser only (the console's first paint waits on it)
    for argv in ([], ["--db", "x"], ["--db", "task"], ["--config=c.yaml"]):
        assert cli_main._groups_for(argv) == ("console",), argv


def test_the_engine_and_the_session_worker_load_no_acp_or_mcp_sdk():
    """`serve`, the console's engine and the demo's seeding run the session worker: the ACP
    SDK loads with the first ACP turn (or a run to recover), the MCP SDK when an MCP server
    is configured (~1 s of imports together on a busy machine)."""
    out = _child("import sys\nimport clawtower.core.sessions.runner, clawtower.core.engine\n"
                 "import clawtower.core.flows.engine, clawtower.core.triggers.service\n"
                 "import clawtower.core.demo.sessions, clawtower.core.tools.registry\n"
                 + _loaded(("acp""acp", "mcp", "mcp_types",
                                 *ours("core.tools.mcp", "core.acp.bridge",
                                       "core.acp.client"))))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
