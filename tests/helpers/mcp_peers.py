"""The real MCP servers (installed by `scripts/install-peers.sh mcp` into $CLAWTOWER_PEERS,
default ~/.cache/clawtower-peers) and the fake SDK server of tests/helpers/fake_mcp_server.py.

A test needing a missing peer skips with the reason (printed, and shown by -rs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clawtower.core.tools.config import McpServerConfig

PEERS = Path(os.environ.get("CLAWTOWER_PEERS", Path.home() / ".cache" / "clawtower-peers"))
TIME = PEERS / "mcp" / "bin" / "mcp-server-time"
GIT = PEERS / "mcp" / "bin" / "mcp-server-git"
EVERYTHING = PEERS / "npm" / "node_modules" / ".bin" / "mcp-server-everything"
FAKE = Path(__file__).resolve().parent / "fake_mcp_server.py"
INSTALL = "run scripts/install-peers.sh mcp"


def _missing(path: Path, what: str) -> str | None:
    if not path.exists() or not os.access(path, os.X_OK):
        return f"peer missing: {what} not installed at {path} ({INSTALL})"
    return None


def missing_reason(peer: str) -> str | None:
    if peer == "time":
        return _missing(TIME, "mcp-server-time")
    if peer == "git":
        return _missing(GIT, "mcp-server-git") or (
            None if shutil.which("git") else "peer missing: no git executable on PATH")
    if peer == "everything":
        return _missing(EVERYTHING, "@modelcontextprotocol/server-everything") or (
            None if shutil.which("node") else "peer missing: no node executable on PATH")
    raise ValueError(peer)


def require(peer: str) -> None:
    reason = missing_reason(peer)
    if reason:
        print(f"\nSKIP: {reason}")
        pytest.skip(reason)


def peer_config(peer: str, **kw: Any) -> McpServerConfig:
    """A server config for a real peer (skips the caller when it is missing)."""
    require(peer)
    if peer == "time":
        return McpServerConfig(name="time", command=str(TIME), **kw)
    if peer == "everything":
        return McpServerConfig(name="everything", command=str(EVERYTHING), args=["stdio"],
                               **kw)
    raise ValueError(peer)


def git_config(repo: Path, **kw: Any) -> McpServerConfig:
    require("git")
    return McpServerConfig(name="git", command=str(GIT), args=["--repository", str(repo)],
                           **kw)


def make_git_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    for cmd in (["git", "init", "-q", "-b", "main"], ):
        subprocess.run(cmd, cwd=path, check=True, env=env, timeout=30)
    (path / "README.md").write_text("hello\n")
    subprocess.run(["git", "add", "README.md"], cwd=path, check=True, env=env, timeout=30)
    subprocess.run(["git", "commit", "-q", "-m", "first"], cwd=path, check=True, env=env,
                   timeout=30)
    (path / "new.txt").write_text("untracked\n")
    return path


def fake_config(tmp: Path, name: str = "fake", **kw: Any) -> McpServerConfig:
    """The fake server: its `echo` description is read from tmp/desc.txt on every list,
    every call it receives is appended to tmp/calls.txt."""
    env = {"FAKE_MCP_DESC_FILE": str(tmp / "desc.txt"),
           "FAKE_MCP_CALLS_FILE": str(tmp / "calls.txt"), **kw.pop("env", {})}
    kw.setdefault("connect_timeout_s", 30)
    kw.setdefault("call_timeout_s", 30)
    return McpServerConfig(name=name, command=sys.executable, args=[str(FAKE)], env=env, **kw)


def calls_received(tmp: Path) -> list[str]:
    p = tmp / "calls.txt"
    return p.read_text().split() if p.exists() else []
