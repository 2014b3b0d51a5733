"""Which triggers exist: every installed expert's triggers, re-read when packages change."""

from __future__ import annotations

import contextlib
import os
import time

from ..experts import home
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
            for s in triggers_of(pkg):
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
