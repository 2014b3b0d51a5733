"""A stdout stand-in for streaming tests: what was written between flushes, i.e. the chunks
a user sees arrive."""

from __future__ import annotations


class ChunkRecorder:
    """A stdout that remembers what was written between flushes (the chunks a user sees)."""

    def __init__(self) -> None:
        self.pending = ""
        self.chunks: list[str] = []

    def write(self, s: str) -> int:
        self.pending += s
        return len(s)

    def flush(self) -> None:
        if self.pending:
            self.chunks.append(self.pending)
            self.pending = ""

    @property
    def text(self) -> str:
        return "".join(self.chunks) + self.pending
