"""Helpers for tests that run child Python processes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HELPERS = Path(__file__).resolve().parent


def child_env(**extra: str) -> dict[str, str]:
    """Environment for child Python processes: the repo and the helpers importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), str(HELPERS), env.get("PYTHONPATH", "")) if p)
    env.pop("HYPOTHESIS_PROFILE", None)
    env.update(extra)
    return env


def stop(proc: subprocess.Popen[str], what: str | None = None, timeout: float = 10) -> int:
    """SIGTERM, then SIGKILL after `timeout` s; the exit code. With `what` (e.g. "serve"),
    a process that ignores SIGTERM fails the test: stopping cleanly is what is tested."""
    proc.terminate()
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)
        if what is not None:
            pytest.fail(f"{what} did not stop on SIGTERM")
        return proc.returncode
