"""Which triggers exist: every installed expert's triggers, re-read when packages change."""

from __future__ import annotations

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

    def refresh(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._at < self.reload_s:
            return
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
