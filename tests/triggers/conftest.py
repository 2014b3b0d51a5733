from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clawtower.core.store import open_store
from clawtower.core.store.interface import Store
from tests.helpers.hook_expert import install_hook_expert


@pytest.fixture
def hook_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """CLAWTOWER_HOME with hook-expert installed (webhook credentials set)."""
    home = tmp_path / "home"
    monkeypatch.setenv("CLAWTOWER_HOME", str(home))
    install_hook_expert(tmp_path)
    return home


@pytest.fixture
async def wall_store(tmp_path: Path) -> AsyncIterator[Store]:
    """A store on the wall clock (retry delays and leases pass in real time)."""
    s = await open_store(str(tmp_path / "t.db"))
    try:
        yield s
    finally:
        await s.close()
