"""`clawtower agents` and `clawtower llm`: configured agents and direct model calls."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

Handler = Callable[[argparse.Namespace], Awaitable[int]]
HANDLERS: dict[str, Handler] = {}


def register(cmd: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this module's subcommands; `cmd(name, help)` makes a top-level subparser."""
    _: Any = cmd
