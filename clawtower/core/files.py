"""The one way a config or state file is written: whole, checked, and never half.

`write_text` builds nothing itself; the caller hands it the new content and (for a file
something will load again) the loader that will read it. The content is checked first, so a
refusal raises before anything is touched and the old file stays byte for byte; then it goes
to a temp file unique to this write in the same folder (two writers never share one, as a
fixed `name.tmp` did), is fsynced, replaces the file, and the folder is fsynced so the
rename itself survives a power cut. A reader sees the old file or the new one, never a mix.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: Path, data: bytes, *, mode: int | None = None,
                new: bool = False) -> None:
    """Replace `path` whole with `data` (unique temp file, fsync, rename, fsync the folder).
    `mode`: the file's permissions; by default those it had, else 0644. `new`: only create
    it: a file already there (even one that appeared a moment ago) raises FileExistsError
    and is left as it was (the temp file is linked in, which never replaces)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if new:
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def write_text(path: Path, text: str, *, check: Callable[[str], Any] | None = None,
               mode: int | None = None) -> None:
    """Replace `path` with `text` after `check(text)` accepts it (the loader that will read
    the file; it raises to refuse, and then nothing is written)."""
    if check is not None:
        check(text)
    write_bytes(path, text.encode("utf-8"), mode=mode)


def write_if_changed(path: Path, text: str, *, mode: int | None = None) -> bool:
    """`write_text` unless the file already holds exactly `text`; whether it wrote."""
    try:
        if Path(path).read_text(encoding="utf-8") == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass
    write_text(path, text, mode=mode)
    return True


def remove_unheld(folder: Path, locks: Iterable[Path]) -> bool:
    """Remove `folder` when no process holds (flock) any of `locks`, the lock files its
    owners hold while they live: what is left of owners that died before their cleanup.
    False, with nothing removed, while a lock is held or cannot be opened."""
    import fcntl
    import shutil

    held: list[int] = []
    try:
        for lock in locks:
            fd = os.open(lock, os.O_RDWR)
            held.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while a process has it
        shutil.rmtree(folder)
        return True
    except OSError:
        return False
    finally:
        for fd in held:
            os.close(fd)


__all__ = ["fsync_dir", "remove_unheld", "write_bytes", "write_if_changed", "write_text"]
