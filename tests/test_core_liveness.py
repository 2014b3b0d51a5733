"""core/liveness.py: a process tag names this host's process; a dead or recycled pid is
gone; another host's process, or no tag, is unknown."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from clawtower.core.liveness import liveness, process_tag


def test_this_process_is_alive() -> None:
    tag = process_tag()
    host, pid, _start = tag.rsplit(":", 2)
    assert (host, int(pid)) == (socket.gethostname(), os.getpid())
    assert liveness(tag) == "alive"


def test_a_finished_process_is_gone() -> None:
    child = subprocess.run([sys.executable, "-c", "from clawtower.core.liveness import"
                            " process_tag; print(process_tag())"], capture_output=True, text=True,
                           check=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert liveness(child.stdout.strip()) == "gone"


def test_a_recycled_pid_is_gone() -> None:
    host, pid, start = process_tag().rsplit(":", 2)
    if not start:
        pytest.skip("no /proc here: start times are unknown, a pid is all there is")
    assert liveness(f"{host}:{pid}:{int(start) + 1}") == "gone"


def test_another_host_or_no_tag_is_unknown() -> None:
    assert liveness(f"not-{socket.gethostname()}:{os.getpid()}:1") == "unknown"
    assert liveness("") == "unknown" and liveness(None) == "unknown"
    assert liveness("garbage") == "unknown"
    assert liveness(f"{socket.gethostname()}:pid:1") == "unknown"
