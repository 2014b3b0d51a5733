"""Conventions of core/ that a linter does not check."""

from __future__ import annotations

import re
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "core"


def test_core_bounds_waits_with_asyncio_timeout_not_wait_for() -> None:
    """Python 3.11's asyncio.wait_for can swallow a cancellation that arrives as the inner
    call finishes (core/aio.py); every timed wait in core uses `asyncio.timeout`."""
    offenders = [f"{p.relative_to(CORE.parent)}:{n}"
                 for p in sorted(CORE.rglob("*.py"))
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if re.search(r"\bwait_for\(", line) and "wait_for_change" not in line]
    assert offenders == []
