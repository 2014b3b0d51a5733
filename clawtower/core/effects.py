"""Where approved side effects land. Receivers are idempotent on the key we pass them.

Protocol (see README, durability): commit intent -> perform(key) -> commit done. A crash
between perform and done re-performs with the same key on recovery; the receiver dedupes.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Protocol


class EffectSink(Protocol):
    async def perform(self, kind: str, target: str, description: str, idem_key: str) -> str: ...


class JournalSink:
    """An idempotent receiver that appends each effect once to a JSON-lines journal."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = asyncio.Lock()

    def _seen(self) -> set[str]:
        if not self.path.exists():
            return set()
        keys = set()
        with self.path.open(encoding="utf-8") as f:
            for line in f:
                try:
                    keys.add(json.loads(line)["idem_key"])
                except (ValueError, KeyError):
                    continue
        return keys

    def _write(self, record: dict[str, str]) -> str:
        if record["idem_key"] in self._seen():
            return f"already performed ({record['idem_key']})"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return f"performed {record['kind']} -> {record['target'] or '(none)'}"

    async def perform(self, kind: str, target: str, description: str, idem_key: str) -> str:
        async with self._lock:
            return await asyncio.to_thread(self._write, {
                "kind": kind, "target": target, "description": description, "idem_key": idem_key})

    def performed(self) -> list[dict[str, str]]:
        if not self.path.exists():
            return []
        with self.path.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]


class MemorySink:
    """An idempotent in-memory receiver for tests and benchmarks."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.keys: set[str] = set()

    async def perform(self, kind: str, target: str, description: str, idem_key: str) -> str:
        self.calls.append(idem_key)
        if idem_key in self.keys:
            return "already performed"
        self.keys.add(idem_key)
        return f"performed {kind}"
