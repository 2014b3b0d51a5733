"""Issue 41: `clawtower --version` names the installed distribution's version, and what the
product reads at run time is package data found through `clawtower.core.assets`, never a
path computed from a module's `__file__` (a wheel has no source tree around it)."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from procs import ROOT, child_env

from clawtower.core.assets import asset


def test_version_prints_the_installed_distribution_s_version() -> None:
    out = subprocess.run([sys.executable, "-m", "clawtower", "--version"], capture_output=True,
                         text=True, env=child_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"clawtower {version('clawtower')}\n"
    assert out.stderr == ""


def test_version_loads_no_command_group() -> None:
    code = ("import sys\nfrom clawtower.cli.main import main\n"
            "try:\n    main(['--version'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "print(sorted(m for m in sys.modules if m.startswith('clawtower.cli.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=child_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    loaded = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    assert not [m for m in loaded if m.rsplit(".", 1)[-1] in ("demo", "workflow", "flow")]


def test_shipped_files_are_inside_the_package() -> None:
    package = ROOT / "clawtower"
    for parts in (("themes", "clawtower-dark.yaml"), ("examples", "demo", "agents.yaml"),
                  ("examples", "workflows", "release.lobster"), ("tui", "app.tcss"),
                  ("tui", "web_console.html")):
        found = asset(*parts)
        assert found.is_file(), found
        assert found.resolve().is_relative_to(package.resolve()), found


def test_no_module_finds_files_from_its_own_location() -> None:
    """`Path(__file__).parent...` finds files in a checkout and nothing in a wheel's
    site-packages when the file is outside the package: every shipped file is read through
    assets.asset()."""
    offenders = []
    for path in sorted((ROOT / "clawtower").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("clawtower/examples/") or rel == "clawtower/core/assets.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(n, ast.Name) and n.id == "__file__" for n in ast.walk(tree)):
            offenders.append(rel)
    assert offenders == []


def test_the_checkout_s_examples_and_themes_are_the_package_s() -> None:
    """The README's paths (`examples/...`, `themes/`) work in a checkout: they are links
    into the package data, one copy of each file."""
    for name in ("examples", "themes"):
        top = ROOT / name
        assert top.is_symlink(), top
        assert top.resolve() == (ROOT / "clawtower" / name).resolve()
    assert Path(ROOT / "examples" / "demo" / "agents.yaml").is_file()
