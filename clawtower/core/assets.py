"""The files the product ships beside its code (themes, the demo's agents and specs, the
examples, the `clawtower init` project): package data of `clawtower`, found through
`importlib.resources`, so a wheel installed anywhere finds them where a checkout does. Never
a path computed from a module's `__file__` (a wheel has no source tree around it)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def asset(*parts: str) -> Path:
    """The shipped file or folder `parts` (e.g. `asset("examples", "demo")`). Installed as
    files (pip, pipx and editable installs all do), so it is a real path commands can open
    and copy; a zipped install is refused by name rather than half-working."""
    root = files("clawtower")
    if not isinstance(root, Path):
        raise RuntimeError(f"clawtower is installed as {type(root).__name__}, not as files: "
                           "reinstall it with pip or pipx")
    return root.joinpath(*parts)
