"""Helpers shared by the console tests (imported as a top-level module: tests/tui is on
sys.path under pytest's default import mode, and is deliberately not a package, so that
`tui` always names the console package)."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from textual.pilot import Pilot

SIZE = (140, 40)


def copy_store(src: Path, dst: Path) -> str:
    """A copy of a seeded store (with its WAL) for one test; the path as a string."""
    for suffix in ("", "-wal", "-shm"):
        s = Path(f"{src}{suffix}")
        if s.exists():
            Path(f"{dst}{suffix}").write_bytes(s.read_bytes())
    return str(dst)


async def until(pilot: Pilot[Any], check: Callable[[], bool], timeout: float = 10.0) -> float:
    """Let the app run until `check()` holds; returns the seconds it took."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not true after {timeout} s")
        await pilot.pause(0.02)
    return time.monotonic() - start


def shown(widget: Any, width: int = 200) -> str:
    """The plain text a Static shows (Rich renderables rendered, styles dropped)."""
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()
