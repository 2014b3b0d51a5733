"""A test run's parent-death guard: what a pytest process started dies with it, even when the
run is killed with SIGKILL (atexit handlers, pgserver's included, never run then).

`start()` (tests/conftest.py, in every pytest process: the run, and each xdist worker) marks
the process's environment with CLAWTOWER_TEST_RUN=<mark>, inherited by everything it starts,
and starts this file as a watchdog in its own session, so a signal sent to the run's process
group (Ctrl-C, `timeout`, a CI runner) does not reach it. The watchdog waits for its parent to
go (a pidfd, else polling its parent pid), then stops:
- every process whose environment carries the mark: the PostgreSQL servers pgserver starts
  (pg_ctl detaches them from the run), llama-server, CLI children, serve/gateway processes,
  xdist workers (each has a watchdog of its own);
- every process that was the run's descendant at the last look (once a second): MCP servers
  and ACP agents, whose environments are scrubbed of the mark;
with SIGTERM (a PostgreSQL postmaster SIGQUIT: immediate shutdown), then SIGKILL after a few
seconds. It then removes the run's throw-away folders: a stopped PostgreSQL server's (a temp
folder named clawtower-*), those made with `throwaway_folder()` (listed in a file named by
CLAWTOWER_TEST_RUN_FOLDERS) and those named on its command line. On a normal exit it finds
nothing left to stop and only removes the folders.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

MARK = "CLAWTOWER_TEST_RUN"
LIST = "CLAWTOWER_TEST_RUN_FOLDERS"  # a file: folders to remove when the run is gone
GRACE = 3.0  # seconds between SIGTERM and SIGKILL

_watchdog: subprocess.Popen[bytes] | None = None


def start(*remove: str) -> str:
    """Mark this process's environment and start its watchdog; the mark. `remove`: folders
    to delete when this process is gone."""
    global _watchdog
    mark = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.environ[MARK] = mark
    fd, listing = tempfile.mkstemp(prefix=f"clawtower-run-{mark}-", suffix=".txt")
    os.close(fd)
    os.environ[LIST] = listing
    env = {k: v for k, v in os.environ.items() if k not in (MARK, LIST)}
    _watchdog = subprocess.Popen(
        [sys.executable, __file__, str(os.getpid()), mark, listing, *remove],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True, env=env)
    # it outlives this process by design: no "still running" ResourceWarning at exit
    _watchdog.returncode = 0
    return mark


def throwaway_folder(prefix: str) -> Path:
    """A new temp folder that goes with this process (even killed): for a test's server."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    listing = os.environ.get(LIST)
    if listing:
        with open(listing, "a", encoding="utf-8") as f:
            f.write(f"{folder}\n")
    return folder


# ---------------------------------------------------------------------------- the watchdog


def _stat(pid: str) -> tuple[int, int] | None:
    """(ppid, start time in clock ticks) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()  # after "pid (comm) "
    return int(fields[1]), int(fields[19])


def _processes() -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(name)
            if st is not None:
                out[int(name)] = st
    return out


def _descendants(root: int, seen: dict[int, int]) -> dict[int, int]:
    """pid -> start time of every process below `root` now, and of those in `seen` still
    alive (a child that was orphaned since the last look)."""
    procs = _processes()
    out = {pid: t for pid, t in seen.items() if pid in procs and procs[pid][1] == t}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    todo = [c for p in (root, *out) for c in children.get(p, ())]
    visited: set[int] = set()
    while todo:
        pid = todo.pop()
        if pid not in visited:
            visited.add(pid)
            out[pid] = procs[pid][1]
            todo.extend(children.get(pid, ()))
    return out


def _marked(mark: str) -> dict[int, int]:
    needle = f"{MARK}={mark}".encode()
    out: dict[int, int] = {}
    for pid, (_, started) in _processes().items():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if needle in env:
            out[pid] = started
    return out


def _is_postmaster(pid: int) -> Path | None:
    """The data folder of a PostgreSQL postmaster, else None."""
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None
    return cwd if exe == "postgres" and (cwd / "PG_VERSION").exists() else None


def _is_watchdog(pid: int) -> bool:
    """This process, or another run's watchdog (an xdist worker's does its own work)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return pid == os.getpid() or (len(argv) > 1 and argv[1] == __file__.encode())


def _alive(pid: int, started: int) -> bool:
    st = _stat(str(pid))
    return st is not None and st[1] == started


def reap(targets: dict[int, int]) -> list[Path]:
    """Stop `targets` (pid -> start time); the PostgreSQL data folders of those stopped."""
    folders: list[Path] = []
    for pid, started in targets.items():
        if not _alive(pid, started):
            continue
        data = _is_postmaster(pid)
        if data is not None:
            folders.append(data)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGQUIT if data is not None else signal.SIGTERM)
    deadline = time.monotonic() + GRACE
    while time.monotonic() < deadline and any(_alive(p, s) for p, s in targets.items()):
        time.sleep(0.05)
    for pid, started in targets.items():
        if _alive(pid, started):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    return folders


def _throwaway(folder: Path) -> Path | None:
    """The test's temp folder around a PostgreSQL data folder (…/clawtower-pg*/data)."""
    tmp = Path(tempfile.gettempdir()).resolve()
    for candidate in (folder, folder.parent):
        if candidate.parent == tmp and candidate.name.startswith("clawtower-"):
            return candidate
    return None


def _wait_for_parent(parent: int) -> dict[int, int]:
    """Wait for `parent` to go; its descendants at the last look (pid -> start time)."""
    try:
        fd: int | None = os.pidfd_open(parent)
    except (AttributeError, OSError):
        fd = None
    poller = select.poll()
    if fd is not None:
        poller.register(fd, select.POLLIN)
    seen: dict[int, int] = {}
    while os.getppid() == parent:
        seen = _descendants(parent, seen)
        if fd is not None:
            if poller.poll(1000):
                break
        else:
            time.sleep(1.0)
    return seen


def main(argv: list[str]) -> None:
    parent, mark, listing, remove = int(argv[0]), argv[1], Path(argv[2]), argv[3:]
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    targets = {pid: t for pid, t in {**_wait_for_parent(parent), **_marked(mark)}.items()
               if not _is_watchdog(pid)}
    folders = [f for f in map(_throwaway, reap(targets)) if f is not None]
    with contextlib.suppress(OSError):
        folders += map(Path, listing.read_text(encoding="utf-8").splitlines())
    for folder in [*folders, *map(Path, remove)]:
        shutil.rmtree(folder, ignore_errors=True)
    listing.unlink(missing_ok=True)


if __name__ == "__main__":
    main(sys.argv[1:])
