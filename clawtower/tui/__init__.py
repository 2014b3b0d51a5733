"""The operator console (Textual). Everything it does goes through `core`'s public API.

`ClawtowerApp` and `run_console` load lazily: importing a screen module (`tui.screens.*`)
does not load the app, so screens never sit in an import circle with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import ClawtowerApp, run_console

__all__ = ["ClawtowerApp", "run_console"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import app

        return getattr(app, name)
    raise AttributeError(f"module 'tui' has no attribute {name!r}")
