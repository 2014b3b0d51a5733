"""Shared fixtures for the core tests: a real store on a temp file, a fake clock, helpers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
HELPERS = Path(__file__).resolve().parent / "helpers"
if str(HELPERS) not in sys.path:
    sys.path.insert(0, str(HELPERS))

from core.clock import FakeClock  # noqa: E402
from core.store import open_store  # noqa: E402
from core.tasks.service import Tasks  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run tests marked slow (the full-size durability figures)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked slow run only when asked: --run-slow, CLAWTOWER_RUN_SLOW=1, or a -m
    expression naming slow. The default run covers each requirement at a smaller scale."""
    markexpr = config.getoption("-m") or ""
    if config.getoption("--run-slow") or os.environ.get("CLAWTOWER_RUN_SLOW") == "1" \
            or "slow" in markexpr:
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow or -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
async def store(db_path: Path, clock: FakeClock):
    s = await open_store(db_path, clock=clock)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def tasks(store) -> Tasks:
    return Tasks(store)

