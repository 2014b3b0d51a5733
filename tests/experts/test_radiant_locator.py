"""tests/experts/radiant.py finds the openexperts package where the README says, in order,
and reports None (the radiant tests then skip) when it is nowhere."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from . import radiant as loc

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("OPENEXPERTS_FIXTURE", raising=False)
    monkeypatch.delenv("OPENEXPERTS_REPO", raising=False)
    monkeypatch.setattr(loc, "MIRROR", tmp_path / "no-mirror")
    return tmp_path


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, timeout=60, capture_output=True,
                   env={**os.environ, **GIT_ENV})


def _repo(tmp_path: Path) -> Path:
    """A stand-in openexperts checkout: the package path holds a one-line expert.yaml."""
    if shutil.which("git") is None:
        pytest.skip("no git executable on PATH")
    work = tmp_path / "openexperts"
    pkg = work / loc.SUBDIR
    pkg.mkdir(parents=True)
    (pkg / "expert.yaml").write_text("name: stand-in\n")
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", ".")
    _git(work, "commit", "-qm", "stand-in")
    return work


def test_nothing_found_means_none(nowhere: Path) -> None:
    assert loc.find_radiant(nowhere / "dest") is None
    assert "OPENEXPERTS_FIXTURE" in loc.SKIP_REASON and "OPENEXPERTS_REPO" in loc.SKIP_REASON


def test_fixture_directory_comes_first(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = nowhere / "pkg"
    d.mkdir()
    (d / "expert.yaml").write_text("name: x\n")
    monkeypatch.setenv("OPENEXPERTS_FIXTURE", str(d))
    monkeypatch.setenv("OPENEXPERTS_REPO", str(_repo(nowhere)))
    assert loc.find_radiant(nowhere / "dest") == d
    monkeypatch.setenv("OPENEXPERTS_FIXTURE", str(nowhere / "empty"))  # no expert.yaml there
    assert loc.find_radiant(nowhere / "dest") == nowhere / "openexperts" / loc.SUBDIR


def test_repo_checkout_or_bare_repository(nowhere: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    work = _repo(nowhere)
    monkeypatch.setenv("OPENEXPERTS_REPO", str(work))
    assert loc.find_radiant(nowhere / "dest") == work / loc.SUBDIR
    bare = nowhere / "bare.git"
    _git(nowhere, "clone", "-q", "--bare", str(work), str(bare))
    monkeypatch.setenv("OPENEXPERTS_REPO", str(bare))
    found = loc.find_radiant(nowhere / "dest")
    assert found is not None and found.is_relative_to(nowhere / "dest")
    assert (found / "expert.yaml").read_text() == "name: stand-in\n"
    monkeypatch.delenv("OPENEXPERTS_REPO")
    monkeypatch.setattr(loc, "MIRROR", bare)  # the local mirror is the last place looked
    assert loc.find_radiant(nowhere / "dest2") is not None
