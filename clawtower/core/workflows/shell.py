"""Run a step's shell command: `/bin/sh -lc CMD` in a process group of its own.

A timeout or a cancellation kills the whole group (a shell's background children too), so
a timed-out step leaves nothing behind. Exit status and streams are what Lobster reports.
The group's leader also dies with its driver (Linux PR_SET_PDEATHSIG), so a `kill -9` of
the driver does not leave a step finishing unseen; whatever the leader started that is still
in its group is killed by the run's adopter (core.liveness.end_group) before it decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass

SHELL = "/bin/sh"


@dataclass(frozen=True)
class ShellResult:
    code: int | None
    stdout: str
    stderr: str


class StepTimeout(Exception):
    """The step's own timeout_ms elapsed (its process group was killed)."""


def _kill_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _death_guard() -> Callable[[], None] | None:
    """A preexec hook: SIGKILL this child when the thread that spawned it dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def guard() -> None:  # runs in the child between fork and exec: nothing that locks
        prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the driver died before the guard was set
            os._exit(137)

    return guard


_GUARDS: dict[int, Callable[[], None] | None] = {}


def death_guard() -> Callable[[], None] | None:
    """This process's guard (built once per pid: it names its parent)."""
    pid = os.getpid()
    if pid not in _GUARDS:
        _GUARDS[pid] = _death_guard()
    return _GUARDS[pid]


class ShellNotFound(Exception):
    """The shell (or the step's cwd) does not exist: Lobster's spawn ENOENT."""


def shell_argv(command: str, env: dict[str, str]) -> list[str]:
    """`/bin/sh -lc CMD`, or LOBSTER_SHELL with the arguments Lobster gives that shell."""
    shell = (env.get("LOBSTER_SHELL") or "").strip()
    if not shell:
        return [SHELL, "-lc", command]
    low = shell.lower()
    if low.endswith(("powershell", "powershell.exe", "pwsh", "pwsh.exe")):
        return [shell, "-NoProfile", "-Command", command]
    if low.endswith(("cmd", "cmd.exe")):
        return [shell, "/d", "/s", "/c", command]
    return [shell, "-lc", command]


async def run_shell(command: str, *, stdin: str | None, env: dict[str, str], cwd: str | None,
                    timeout_s: float | None = None,
                    not_found: str = "workflow shell not found; check LOBSTER_SHELL or ComSpec",
                    on_spawn: Callable[[int], None] | None = None) -> ShellResult:
    """Run and wait; on timeout raise StepTimeout, on cancellation re-raise, after killing."""
    return await run_argv(shell_argv(command, env), stdin=stdin, env=env, cwd=cwd,
                          timeout_s=timeout_s, not_found=not_found, on_spawn=on_spawn)


async def run_argv(argv: list[str], *, stdin: str | None, env: dict[str, str],
                   cwd: str | None, timeout_s: float | None = None,
                   not_found: str = "command not found",
                   on_spawn: Callable[[int], None] | None = None) -> ShellResult:
    """Run a program (no shell) in a process group of its own, which dies with this process;
    same contract as run_shell. `on_spawn(pid)`: told the group's id once it exists."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, cwd=cwd, start_new_session=True,
            preexec_fn=death_guard())
    except (FileNotFoundError, NotADirectoryError):
        raise ShellNotFound(not_found) from None
    if on_spawn is not None:
        on_spawn(proc.pid)
    data = stdin.encode("utf-8") if stdin is not None else b""  # EOF, never an open pipe
    try:
        # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation
        async with asyncio.timeout(timeout_s):
            out, err = await proc.communicate(data)
    except TimeoutError:
        _kill_group(proc, signal.SIGKILL)
        with contextlib.suppress(Exception):
            await proc.wait()
        raise StepTimeout() from None
    except BaseException:
        _kill_group(proc, signal.SIGKILL)
        with contextlib.suppress(Exception):
            await asyncio.shield(proc.wait())
        raise
    return ShellResult(proc.returncode if proc.returncode is not None and proc.returncode >= 0
                       else None,
                       out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def failure_message(result: ShellResult, command: str) -> str:
    code = "null" if result.code is None else str(result.code)
    detail = result.stderr.strip() or result.stdout.strip() or command
    return f"workflow command failed ({code}): {detail}"
