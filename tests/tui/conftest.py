"""Console tests: seeded stores, a fixed time zone, no user themes leaking in."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tui_helpers import copy_store

from clawtower.tui.seed import EXAMPLES, seed_demo


@pytest.fixture(autouse=True)
def _isolated_console(tmp_path_factory: pytest.TempPathFactory,
                      monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No user themes leak in, and times render in UTC (the console shows local wall time;
    snapshots must match on any machine). The zone is restored afterwards."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("CLAWTOWER_HOME", str(home))
    monkeypatch.delenv("CLAWTOWER_THEMES", raising=False)
    monkeypatch.delenv("CLAWTOWER_THEME", raising=False)
    monkeypatch.delenv("TEXTUAL_THEME", raising=False)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def seed(path: Path, **kw: object) -> Path:
    asyncio.run(seed_demo(path, **kw))  # type: ignore[arg-type]
    return path


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The full demo store, built once; tests get a copy."""
    return seed(tmp_path_factory.mktemp("demo") / "store.db")


@pytest.fixture
def demo_db(demo_template: Path, tmp_path: Path) -> str:
    return copy_store(demo_template, tmp_path / "store.db")


@pytest.fixture(scope="session")
def release_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One task waiting for approval (the release notes), nothing else."""
    return seed(tmp_path_factory.mktemp("release") / "store.db",
                specs=[EXAMPLES / "specs" / "04-release-notes.yaml"], extra=False)


@pytest.fixture
def release_db(release_template: Path, tmp_path: Path) -> str:
    return copy_store(release_template, tmp_path / "store.db")
