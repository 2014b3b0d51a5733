"""The example expert's README works as typed (issue 39, trap 3): its command lines are read
from `examples/experts/incident-desk/README.md` and run from the repository root with the
project's venv active; the binding they make is recorded with absolute paths and the home the
server writes under, works from another directory, and a binding that cannot work is reported
as a binding problem naming the binding, not as an invalid package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from clawtower.core.experts.bindings import load_bindings
from clawtower.core.tools.mcp import McpServer

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "examples" / "experts" / "incident-desk" / "README.md"


def readme_commands() -> list[str]:
    """The README's indented command lines, continuations joined."""
    out: list[str] = []
    pending = ""
    for line in README.read_text(encoding="utf-8").splitlines():
        if not line.startswith("    ") and not pending:
            continue
        text = line.strip()
        if text.endswith("\\"):
            pending += text[:-1]
            continue
        out.append(pending + text)
        pending = ""
    return [c for c in out if c.startswith("clawtower ")]


def venv_env(home: Path) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)  # the project's venv, as if activated
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAWTOWER_")}
    env.update({"CLAWTOWER_HOME": str(home), "VIRTUAL_ENV": str(Path(bindir).parent),
                "PATH": bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")})
    return env


def sh(line: str, home: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=venv_env(home),
                          capture_output=True, text=True, timeout=120, check=False)


async def test_the_readme_commands_work_as_typed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    commands = readme_commands()
    assert [c.split()[2] for c in commands] == ["install", "bind", "validate"], commands
    for line in commands:
        r = sh(line, home)
        assert r.returncode == 0, f"{line}\n{r.stdout}{r.stderr}"
    assert r.stdout.strip() == "incident-desk: valid"
    raw = yaml.safe_load((home / "expert-config" / "incident-desk" / "bindings.yaml")
                         .read_text(encoding="utf-8"))["tools"]["statuspage"]
    assert Path(raw["command"]).is_absolute() and Path(raw["args"][0]).is_absolute(), raw
    assert Path(raw["args"][0]).name == "statuspage_server.py"
    assert raw["env"] == {"CLAWTOWER_HOME": str(home)}
    # the binding works wherever it is used from
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = sh("clawtower expert validate incident-desk", home, cwd=elsewhere)
    assert r.returncode == 0, r.stdout + r.stderr
    # and the server writes its notices under the home, not ~/.clawtower
    binding = load_bindings(home / "expert-config" / "incident-desk" / "bindings.yaml")
    config = binding["statuspage"].server
    assert config is not None
    server = McpServer(config)
    try:
        await server.call_tool("post_notice", {"service": "api", "summary": "slow"})
    finally:
        await server.aclose()
    assert (home / "statuspage.json").exists()


def test_a_binding_that_cannot_work_is_a_binding_problem(tmp_path: Path) -> None:
    home = tmp_path / "home"
    install = readme_commands()[0]
    assert sh(install, home).returncode == 0
    # a python whose server exits at once: what the system python3 without the SDK does
    bind = ("clawtower expert bind incident-desk statuspage --mcp \"$(which python)\""
            " --arg=-c --arg='import sys; sys.exit(3)'")
    assert sh(bind, home).returncode == 0
    r = sh("clawtower expert validate incident-desk", home)
    assert r.returncode == 2
    assert "binding statuspage: its MCP server" in r.stdout, r.stdout
    assert "not a valid expert package" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "clawtower: error: incident-desk: 1 binding problem (binding statuspage; the package is"
        " valid: fix with clawtower expert bind incident-desk statuspage ...)"]


def test_relative_paths_are_recorded_absolute(tmp_path: Path) -> None:
    from clawtower.core.experts.bindings import absolute_paths

    (tmp_path / "bin").mkdir()
    (tmp_path / "server.py").write_text("")
    raw = {"type": "mcp", "command": "bin/python", "args": ["server.py", "-c", "missing.py",
                                                            "/abs/x.py"], "cwd": "bin"}
    got = absolute_paths(raw, tmp_path)
    assert got == {"type": "mcp", "command": str(tmp_path / "bin" / "python"),
                   "args": [str(tmp_path / "server.py"), "-c", "missing.py", "/abs/x.py"],
                   "cwd": str(tmp_path / "bin")}
    # a bare command is looked up on PATH when the server starts; a skill has no paths
    assert absolute_paths({"type": "mcp", "command": "python3"}, tmp_path)["command"] == (
        "python3")
    assert absolute_paths({"type": "skill", "skill": "x"}, tmp_path) == {
        "type": "skill", "skill": "x"}
