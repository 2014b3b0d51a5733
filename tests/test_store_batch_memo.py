"""Issue 24.3: a value read once per batch (`WriteTx.cached`) never hides a write. The
writer runs a batch of commands in one transaction; a fan-out's commands read the same agent
spec and probe the same memory namespaces, so they cache those per batch. The cache must be
dropped when the batch writes an event of that entity, when a command rolls back, and
between batches (another process may write in between)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from clawtower.core.sessions.registry import _set_spec, spec_by_ref
from clawtower.core.sessions.specs import AgentSpecConfig
from clawtower.core.store.interface import WriteTx

pytestmark = pytest.mark.both_backends  # the writer's batches are the same code on both


def _config(rounds: int) -> AgentSpecConfig:
    return AgentSpecConfig.model_validate(
        {"context_policy": {"budgets": {"max_tool_rounds": rounds}}})


def _rounds(tx: WriteTx) -> int:
    return spec_by_ref(tx, "w").config.context_policy.budgets.max_tool_rounds


async def _batch(store: Any, *commands: Any) -> list[Any]:
    """The commands queued together: the writer takes them in one batch."""
    futures = [store.submit(c) for c in commands]
    return list(await asyncio.gather(*futures, return_exceptions=True))


async def test_a_value_is_loaded_once_per_batch_and_again_in_the_next(store: Any) -> None:
    loads: list[int] = []

    def read(tx: WriteTx) -> str:
        return tx.cached("agentspec", "k", lambda: str(loads.append(1) or len(loads)))

    assert await _batch(store, read, read, read) == ["1", "1", "1"]
    assert await store.execute(read) == "2"  # a new batch reads again


async def test_a_spec_written_in_the_same_batch_is_read_fresh(store: Any) -> None:
    await store.execute(lambda tx: _set_spec(tx, "w", _config(3), "test", "op"))
    out = await _batch(
        store, _rounds,
        lambda tx: _set_spec(tx, "w", _config(7), "test", "op"),
        _rounds)
    assert out[0] == 3 and out[2] == 7

    def both(tx: WriteTx) -> tuple[int, int]:  # inside one command too
        before = _rounds(tx)
        _set_spec(tx, "w", _config(9), "test", "op")
        return before, _rounds(tx)

    assert await store.execute(both) == (7, 9)


async def test_a_rolled_back_write_is_not_served_from_the_cache(store: Any) -> None:
    await store.execute(lambda tx: _set_spec(tx, "w", _config(3), "test", "op"))

    def set_read_fail(tx: WriteTx) -> None:
        _set_spec(tx, "w", _config(5), "test", "op")
        assert _rounds(tx) == 5  # cached after the write, then rolled back with it
        raise RuntimeError("refused")

    out = await _batch(store, _rounds, set_read_fail, _rounds)
    assert out[0] == 3 and isinstance(out[1], RuntimeError) and out[2] == 3


@pytest.mark.parametrize("entity", ["memory", "session"])
async def test_only_the_written_entity_is_dropped(store: Any, entity: str) -> None:
    """A write of another entity keeps the value; the same entity drops it."""
    from clawtower.core.memory.events import MemoryStored
    from clawtower.core.sessions import events as sev

    loads: list[int] = []

    def read(tx: WriteTx) -> int:
        return tx.cached("memory", "any", lambda: loads.append(1) or len(loads))

    def write(tx: WriteTx) -> None:
        from clawtower.core.events import NewEvent
        payload = MemoryStored(namespace="agent:w", key="k", content="c") \
            if entity == "memory" else sev.SessionStopRequested(reason="test")
        tx.emit(NewEvent(entity_id="mem-1" if entity == "memory" else "S-1", actor="op",
                         role="operator", payload=payload))

    out = await _batch(store, read, write, read)
    assert (out[0], out[2]) == ((1, 2) if entity == "memory" else (1, 1))
