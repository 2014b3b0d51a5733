"""The flows' projection read alone: `flow list` (and `Flows.flows`) without the flow
service, its plan checks or the event models (issue 39: a read command starts fast)."""

from __future__ import annotations

from typing import Any

from ..store.interface import Store


async def flows_listing(store: Store, status: str | None = None, limit: int = 200
                        ) -> list[dict[str, Any]]:
    """Flows, newest first (of one status, if given)."""
    if status:
        return await store.fetchall(
            "SELECT * FROM flows WHERE status=? ORDER BY num DESC LIMIT ?", (status, limit))
    return await store.fetchall("SELECT * FROM flows ORDER BY num DESC LIMIT ?", (limit,))
