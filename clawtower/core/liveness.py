"""Which process drives something, and whether that process is still there.

A workflow run records the process that drives it (host, pid and the pid's start time, so a
recycled pid is not mistaken for the original). A run left `running` by a process that died
(SIGKILL, a power cut) can then be told apart from one still working, and shown as such.
"""

from __future__ import annotations

import os
import signal
import socket
import time
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


def process_tag(pid: int | None = None) -> str:
    """This process (or `pid`) as `host:pid:start`."""
    own = os.getpid()
    pid = own if pid is None else pid
    if pid == own:  # this process's start never changes (a fork has another pid)
        global _OWN
        if _OWN is None or _OWN[0] != own:
            _OWN = (own, _start_ticks(own))
        return f"{socket.gethostname()}:{own}:{_OWN[1]}"
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid)}"


_OWN: tuple[int, str] | None = None  # (pid, start ticks) of this process, read once


def _group_members(pgid: int) -> list[int]:
    """Processes of this host whose process group is `pgid` (Linux /proc)."""
    found: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            found.append(int(name))
    return found


def _own_group(tag: str) -> int | None:
    """The pgid of the group led by the process `tag` names, while that group still exists
    and is the same one: a pid is never reused while a group of that id has members, so a
    group whose leader is gone is still the original; a live leader must match start ticks."""
    parts = tag.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return None
    pgid, start = int(parts[1]), parts[2]
    if not _group_members(pgid):
        return None
    ticks = _start_ticks(pgid)
    if ticks and start and ticks != start:
        return None  # the id now belongs to another process's group
    return pgid


def end_group(tag: str, timeout_s: float = 30.0) -> bool:
    """Kill what is left of a step's process group (SIGKILL) and wait until it is gone.
    True when nothing of it remains (or it was never here)."""
    pgid = _own_group(tag)
    if pgid is None:
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        time.sleep(0.02)
        if not _group_members(pgid):
            return True
    return False


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


def holder_gone(owner: str) -> bool:
    """A lease owner (`host:pid:start#n`) whose process is known gone from this host: its
    lease may be taken over before it expires."""
    return liveness(owner.partition("#")[0]) == "gone"


def unheld(owner: str | None, released: object, expires_at: float | None, now: float) -> bool:
    """A lease row (owner, released, expires_at) that no live process holds: never taken,
    released, lapsed, or held by a process known gone. A first sieve for readers; taking
    the lease (`leases._acquire`) decides."""
    return (owner is None or bool(released) or float(expires_at or 0) <= now
            or holder_gone(owner))


__all__ = ["Liveness", "end_group", "holder_gone", "liveness", "process_tag", "unheld"]
