from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .radiant import SKIP_REASON, find_radiant

# Our own package (written for these tests): every general test runs on it, on any machine.
ACME = Path(__file__).resolve().parent.parent / "fixtures" / "acme-support-expert"


@pytest.fixture
def acme_copy(tmp_path: Path) -> Path:
    """A private copy of our fixture package (tests mutate copies, never the original)."""
    dst = tmp_path / "acme-support-expert"
    shutil.copytree(ACME, dst)
    return dst


@pytest.fixture(scope="session")
def radiant(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The unmodified openexperts radiant fixture, found at test time (never vendored);
    the test skips when it is not on this machine."""
    found = find_radiant(tmp_path_factory.mktemp("openexperts"))
    if found is None:
        pytest.skip(SKIP_REASON)
    return found
