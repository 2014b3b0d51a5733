"""What the folded-event tests share (issue 24.2): a log written by an earlier release read
back, imported verbatim into a store, and the projected rows of two stores compared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clawtower.core.events import StoredEvent, payload_class

Rows = dict[str, list[dict[str, Any]]]


def read_log(path: Path) -> list[StoredEvent]:
    """The events of a JSONL log (one stored event per line, payload as logged)."""
    out = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        payload = payload_class(r["type"]).model_validate_json(r["payload"])
        out.append(StoredEvent(seq=r["seq"], ts=r["ts"], entity=r["entity"],
                               entity_id=r["entity_id"], type=r["type"], actor=r["actor"],
                               role=r["role"], payload=payload, idem_key=r["idem_key"]))
    return out


async def import_log(store: Any, events: list[StoredEvent]) -> None:
    """Log `events` verbatim (their seqs and times) and project them, in one commit."""
    def command(tx: Any) -> None:
        for e in events:
            tx.import_event(e, e.payload.model_dump_json())
    await store.execute(command)


async def rows(store: Any, tables: dict[str, str]) -> Rows:
    """Every row of `tables` ({table: ORDER BY key}), seq-valued columns left out."""
    out = {}
    for table, key in tables.items():
        found = await store.fetchall(f"SELECT * FROM {table} ORDER BY {key}")
        out[table] = [{k: v for k, v in r.items() if "seq" not in k} for r in found]
    return out


def same(a: Rows, b: Rows) -> None:
    """Equal rows; times within a second (a merged event has ONE time where its parts had
    a few microseconds between them)."""
    assert a.keys() == b.keys()
    for table in a:
        assert len(a[table]) == len(b[table]), table
        for x, y in zip(a[table], b[table], strict=True):
            assert x.keys() == y.keys()
            for k in x:
                if isinstance(x[k], float) and x[k] > 1e9:
                    assert abs(x[k] - y[k]) < 1.0, (table, k)
                else:
                    assert x[k] == y[k], (table, k, x[k], y[k])


async def same_as_folded(store: Any, old: list[StoredEvent], new: list[StoredEvent],
                         tables: dict[str, str], folded_db: Path) -> None:
    """`old` imported into `store` and `new` (the same log folded into fewer events) into a
    fresh store at `folded_db` project the same rows, live and after a rebuild."""
    from clawtower.core.store import open_store

    await import_log(store, old)
    other = await open_store(folded_db)
    try:
        await import_log(other, new)
        assert await other.verify_projections() == []
        same(await rows(other, tables), await rows(store, tables))
        await other.rebuild_projections()
        same(await rows(other, tables), await rows(store, tables))
    finally:
        await other.close()
