"""A test run that holds servers until it is killed: run as a child pytest by
tests/test_run_reaper.py and scripts/kill-test-run.py (never collected by the suite: not a
test_*.py file). It starts what a test run starts, says their pids and folders in the JSON
file named by CLAWTOWER_HELD, and waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

SLEEPER = "import time; time.sleep(600)"


def _postmaster(url: str) -> tuple[int, Path]:
    """The pid and data folder of the pgserver postmaster behind `url` (its socket folder)."""
    host = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["host"][0]
    data = Path(host)
    return int((data / "postmaster.pid").read_text().split()[0]), data


def _argv(proc: Path) -> list[str]:
    try:
        return (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def test_hold_servers(pg_server_url: str, request: pytest.FixtureRequest) -> None:
    held: dict[str, Any] = {"pids": {}, "folders": []}
    pid, data = _postmaster(pg_server_url)
    held["pids"]["postgres"] = pid
    held["folders"].append(str(data.parent))
    if os.environ.get("CLAWTOWER_HELD_LLAMA") == "1":
        port = str(urllib.parse.urlsplit(request.getfixturevalue("llama")).port)
        held["pids"]["llama-server"] = next(
            int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
            and "llama_cpp.server" in _argv(p) and f"--port\0{port}\0" in "\0".join(_argv(p)))
    # an MCP server or ACP agent: its own session, an environment without the run's mark
    scrubbed = subprocess.Popen([sys.executable, "-c", SLEEPER], start_new_session=True,
                                env={"PATH": os.environ.get("PATH", "")})
    held["pids"]["scrubbed-child"] = scrubbed.pid
    # a daemon (like pg_ctl's postgres): detached from the run, its parent gone at once
    daemon = subprocess.run(
        [sys.executable, "-c", "import os, subprocess, sys\n"
         f"p = subprocess.Popen([sys.executable, '-c', {SLEEPER!r}], start_new_session=True,"
         " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
         "print(p.pid)"], capture_output=True, text=True, check=True)
    held["pids"]["daemon"] = int(daemon.stdout)
    held["pids"]["pytest-worker"] = os.getpid()
    time.sleep(1.5)  # the watchdog looks at the run's descendants once a second
    Path(os.environ["CLAWTOWER_HELD"]).write_text(json.dumps(held))
    time.sleep(600)
