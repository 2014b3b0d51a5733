"""Helpers for tests that run child Python processes."""

from __future__ import annotations

import os
from pathlib import Path

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
