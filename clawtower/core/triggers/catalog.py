"""Which triggers exist: every installed expert's triggers, re-read when packages change."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time

from ..errors import ValidationError
from ..experts import home
from ..experts.bindings import bindings_path, load_bindings
from . import presets
from .spec import TriggerSpec, triggers_of

RELOAD_S = 2.0


class Catalog:
    """The installed experts' triggers by (expert, name); `refresh()` re-reads the packages
    at most every RELOAD_S seconds (an install or update shows up without a restart)."""

    def __init__(self, reload_s: float = RELOAD_S) -> None:
        self.reload_s = reload_s
        self._at = 0.0
        self._specs: dict[tuple[str, str], TriggerSpec] = {}
        self._sig: tuple[tuple[str, int], ...] | None = None

    def _signature(self) -> tuple[tuple[str, int], ...]:
        """What changes when a package is installed, updated or removed (stat calls only:
        the webhook's ack path asks, so packages are re-parsed only when this changes)."""
        d = home.experts_dir()
        out = []
        try:
            out.append((str(d), os.stat(d).st_mtime_ns))
            for entry in os.scandir(d):
                with contextlib.suppress(OSError):
                    out.append((entry.name, os.stat(os.path.join(entry.path, "expert.yaml")
                                                    ).st_mtime_ns))
                with contextlib.suppress(OSError):
                    out.append((entry.name + "/bindings",
                                os.stat(bindings_path(entry.name)).st_mtime_ns))
        except OSError:
            pass
        return tuple(sorted(out))

    def refresh(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._at < self.reload_s:
            return
        sig = self._signature()
        if not force and sig == self._sig:
            self._at = time.monotonic()
            return
        self._sig = sig
        specs: dict[tuple[str, str], TriggerSpec] = {}
        for pkg in home.installed():
            bound = _bound_tools(pkg.name)
            for s in triggers_of(pkg):
                if s.requires_tool and not (s.preset and s.preset in presets.names()) \
                        and s.requires_tool not in bound:
                    s = dataclasses.replace(s, inactive=(
                        f"requires_tool {s.requires_tool!r} is not bound (clawtower expert"
                        f" bind {pkg.name} {s.requires_tool} ...)"))
                specs[(s.expert, s.name)] = s
        self._specs = specs
        self._at = time.monotonic()

    def get(self, expert: str, name: str) -> TriggerSpec | None:
        self.refresh()
        return self._specs.get((expert, name))

    def all(self) -> list[TriggerSpec]:
        self.refresh()
        return sorted(self._specs.values(), key=lambda s: (s.expert, s.name))

    def of_type(self, typ: str) -> list[TriggerSpec]:
        return [s for s in self.all() if s.type == typ]


def _bound_tools(expert: str) -> set[str]:
    """The abstract tools `expert` has a binding for (none when its bindings file is bad)."""
    try:
        return set(load_bindings(bindings_path(expert)))
    except ValidationError:
        return set()
