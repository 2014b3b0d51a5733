"""The operator console (Textual). Everything it does goes through `core`'s public API."""

from .app import ClawtowerApp, run_console

__all__ = ["ClawtowerApp", "run_console"]
