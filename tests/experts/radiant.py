"""Find the openexperts example package (radiant-sales-expert-fixture) at test time.

It belongs to github.com/dylanmeyford/openexperts and is never copied into this repository;
the tests about that exact package look for it, in order, at:
1. $OPENEXPERTS_FIXTURE: a directory holding the package (its expert.yaml);
2. $OPENEXPERTS_REPO: a checkout, or a bare git repository, of dylanmeyford/openexperts;
3. the local mirror /work/.mirror/dylanmeyford+openexperts/repo (a bare git directory);
and otherwise the tests skip with SKIP_REASON.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

SUBDIR = "experts/radiant-sales-expert-fixture"
MIRROR = Path("/work/.mirror/dylanmeyford+openexperts/repo")
SKIP_REASON = ("the openexperts fixture is not on this machine; set OPENEXPERTS_FIXTURE or"
               " OPENEXPERTS_REPO")


def _extract(git_dir: Path, dest: Path) -> Path | None:
    """`git archive HEAD SUBDIR` of a git directory, unpacked under dest; None if it has
    no such path (or is no git directory, or git is missing)."""
    git = shutil.which("git")
    if git is None or not git_dir.is_dir():
        return None
    try:
        out = subprocess.run([git, f"--git-dir={git_dir}", "archive", "--format=tar", "HEAD",
                              SUBDIR], capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        tar.extractall(dest, filter="data")
    pkg = dest / SUBDIR
    return pkg if (pkg / "expert.yaml").is_file() else None


def find_radiant(dest: Path) -> Path | None:
    """The package's directory (extracted under dest when it comes from git), or None."""
    fixture = os.environ.get("OPENEXPERTS_FIXTURE")
    if fixture and (Path(fixture) / "expert.yaml").is_file():
        return Path(fixture)
    git_dirs: list[Path] = []
    repo = os.environ.get("OPENEXPERTS_REPO")
    if repo:
        r = Path(repo)
        if (r / SUBDIR / "expert.yaml").is_file():  # a checkout with a work tree
            return r / SUBDIR
        git_dirs.append(r / ".git" if (r / ".git").is_dir() else r)
    git_dirs.append(MIRROR)
    for i, git_dir in enumerate(git_dirs):
        found = _extract(git_dir, dest / f"src-{i}")
        if found is not None:
            return found
    return None
