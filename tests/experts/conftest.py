from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "radiant-sales-expert-fixture"


@pytest.fixture
def fixture_copy(tmp_path: Path) -> Path:
    """A private copy of the vendored fixture (tests mutate copies, never the original)."""
    dst = tmp_path / "radiant-sales-expert"
    shutil.copytree(FIXTURE, dst)
    return dst
