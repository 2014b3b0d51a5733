"""Modules imported together, once, on first need: the event payload models and the
projection handlers register themselves on import, and a command that never decodes or
applies an event should not pay for building them (start-up: BENCHMARKS.md)."""

from __future__ import annotations

import importlib


class LazyModules:
    """`load()` imports every named module the first time; `loaded` says whether it has."""

    def __init__(self, *names: str) -> None:
        self.names = names
        self.loaded = False

    def load(self) -> None:
        if not self.loaded:
            for name in self.names:
                importlib.import_module(name)
            self.loaded = True
