"""Run a step's shell command: `/bin/sh -lc CMD` in a process group of its own.

A timeout or a cancellation kills the whole group (a shell's background children too), so
a timed-out step leaves nothing behind. Exit status and streams are what Lobster reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
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
                    ) -> ShellResult:
    """Run and wait; on timeout raise StepTimeout, on cancellation re-raise, after killing."""
    return await run_argv(shell_argv(command, env), stdin=stdin, env=env, cwd=cwd,
                          timeout_s=timeout_s, not_found=not_found)


async def run_argv(argv: list[str], *, stdin: str | None, env: dict[str, str],
                   cwd: str | None, timeout_s: float | None = None,
                   not_found: str = "command not found") -> ShellResult:
    """Run a program (no shell) in a process group of its own; same contract as run_shell."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, cwd=cwd, start_new_session=True)
    except (FileNotFoundError, NotADirectoryError):
        raise ShellNotFound(not_found) from None
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
