"""Paths a harness may touch: inside its workspace, after resolving `..` and symlinks.

A harness names files by absolute path (the protocol says so); the path is refused when it
(or what its symlinks point to) lies outside the workspace. The error goes back to the
harness as a JSON-RPC error it can read and report.
"""

from __future__ import annotations

import os
from pathlib import Path


class OutsideWorkspace(Exception):
    """The path lies outside the task's workspace."""


def confine(workspace: str, path: str) -> Path:
    """`path` (absolute, or relative to the workspace) resolved inside `workspace`, or
    OutsideWorkspace naming both. Symlinks are followed (`resolve`), so a link inside the
    workspace that points out is refused; a file that does not exist yet is judged by its
    nearest existing parent."""
    root = Path(workspace).resolve()
    raw = Path(os.path.expanduser(path))
    full = raw if raw.is_absolute() else root / raw
    resolved = full.resolve()  # non-strict: missing tail parts stay as written, `..` folded
    if resolved != root and root not in resolved.parents:
        raise OutsideWorkspace(f"path {path!r} is outside the workspace {str(root)!r}:"
                               " refused")
    return resolved


__all__ = ["OutsideWorkspace", "confine"]
