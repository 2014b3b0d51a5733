"""Which process drives something, and whether that process is still there.

A workflow run records the process that drives it (host, pid and the pid's start time, so a
recycled pid is not mistaken for the original). A run left `running` by a process that died
(SIGKILL, a power cut) can then be told apart from one still working, and shown as such.
"""

from __future__ import annotations

import os
import socket
from typing import Literal

Liveness = Literal["alive", "gone", "unknown"]


def _start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux); "" where unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return ""
    # the command name (field 2) may hold spaces and parentheses: split after its last ")"
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def process_tag() -> str:
    """This process as `host:pid:start`."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid)}"


def liveness(tag: str | None) -> Liveness:
    """alive / gone for a process of this host; unknown for another host or no tag."""
    if not tag:
        return "unknown"
    parts = tag.rsplit(":", 2)
    if len(parts) != 3:
        return "unknown"
    host, pid_text, start = parts
    if host != socket.gethostname() or not pid_text.isdigit():
        return "unknown"
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        pass  # someone else's process, but there
    except OSError:
        return "unknown"
    if start and _start_ticks(pid) not in ("", start):
        return "gone"  # the pid was reused by a later process
    return "alive"


__all__ = ["Liveness", "liveness", "process_tag"]
