"""Issue 34: the store refuses what it cannot replay. Every write path ends in `Tx.emit`,
which encodes the payload once: NaN and ±Infinity anywhere in it, or an integer a
projection's column cannot hold, are one ValidationError naming the event type and the
field, and the command's whole write rolls back (other commands of the batch land)."""

from __future__ import annotations

import asyncio
import math
import typing

import pytest
from pydantic import BaseModel

from core import events as ev
from core.errors import ValidationError
from core.events import NewEvent, Payload, payload_class, registered_types
from core.memory.events import MemoryStored
from core.store.storable import Unstorable, first_problem


def memory(key: str, expires_at: float | None = None) -> NewEvent:
    return NewEvent(entity_id=f"shared:t/{key}", actor="tester", role="operator",
                    payload=MemoryStored(namespace="shared:t", key=key, content="x",
                                         expires_at=expires_at))


def task(spec: dict[str, typing.Any], n: int = 1) -> NewEvent:
    return NewEvent(entity_id=f"T-{n}", actor="tester", role="operator",
                    payload=ev.TaskCreated(title="t", spec=spec, spec_ok=True))


BAD = [(float("nan"), "NaN"), (float("inf"), "Infinity"), (float("-inf"), "-Infinity")]


@pytest.mark.both_backends
@pytest.mark.parametrize(("value", "shown"), BAD)
async def test_a_non_finite_float_is_refused_whole_naming_type_and_field(store, value, shown):
    await store.append([memory("before")])
    with pytest.raises(ValidationError) as err:  # the first event of the command was fine
        await store.append([memory("ok"), memory("bad", value)])
    assert isinstance(err.value, Unstorable)
    assert str(err.value).startswith(
        f"memory.stored: field expires_at: {shown} is not a storable number"), err.value
    assert "\n" not in str(err.value)
    assert await store.last_seq() == 1
    rows = await store.fetchall("SELECT key FROM memories ORDER BY key")
    assert [r["key"] for r in rows] == ["before"]
    assert await store.verify_projections() == []


@pytest.mark.both_backends
async def test_nested_values_are_checked_and_the_batch_keeps_other_commands(store):
    spec = {"steps": [{"name": "a", "weights": [1.5, float("nan")]}]}
    refused = store.submit(lambda tx: tx.emit(task(spec)))
    kept = store.submit(lambda tx: tx.emit(task({"x": 1.5}, 2)))
    results = await asyncio.gather(refused, kept, return_exceptions=True)
    assert isinstance(results[0], Unstorable)
    assert "task.created: field spec.steps[0].weights[1]: NaN" in str(results[0])
    assert not isinstance(results[1], BaseException)
    assert [r["id"] for r in await store.fetchall("SELECT id FROM tasks")] == ["T-2"]
    assert await store.verify_projections() == []


@pytest.mark.both_backends
async def test_an_integer_too_large_for_its_column_is_refused_naming_the_field(store):
    too_big = NewEvent(entity_id="T-1", actor="tester", role="system", payload=ev.TaskTransitioned(
        from_phase="spec_draft", to_phase="ready", reason="r", attempt=2**63))
    with pytest.raises(Unstorable, match=r"^task\.transitioned: field attempt: "
                       r"9223372036854775808 is not a storable number"):
        await store.append([task({}), too_big])
    assert await store.last_seq() == 0
    # a free-form dict projects as JSON text, which holds any integer: storable
    await store.append([task({"id": 2**70, "neg": -(2**64)})])
    assert await store.verify_projections() == []


@pytest.mark.both_backends
async def test_what_only_looks_like_a_constant_is_stored(store):
    await store.append([task({"text": "NaN Infinity -Infinity", "NaN": 1e308,
                              "big": 9223372036854775807}),
                        memory("k", 1e9)])
    (row,) = await store.fetchall("SELECT spec FROM tasks")
    assert "NaN Infinity" in row["spec"]
    assert await store.verify_projections() == []


def test_every_model_an_event_carries_encodes_non_finite_floats_as_constants():
    """The writer's check reads the encoded text: a nested model that wrote NaN as `null`
    (pydantic's default) would slip through it. Every payload, and every model reachable
    from one, must inherit Payload's `ser_json_inf_nan="constants"`."""
    seen: set[type[BaseModel]] = set()

    def walk(t: typing.Any) -> None:
        for arg in typing.get_args(t):
            walk(arg)
        if isinstance(t, type) and issubclass(t, BaseModel) and t not in seen:
            seen.add(t)
            assert t.model_config.get("ser_json_inf_nan") == "constants", t
            for f in t.model_fields.values():
                walk(f.annotation)

    for name in registered_types():
        walk(payload_class(name))
    assert Payload in {c for m in seen for c in m.__mro__}
    assert len(seen) > 50


def test_first_problem_names_the_path():
    assert first_problem({"a": [1, {"b": math.inf}]}) == ("a[1].b", "Infinity")
    assert first_problem({"a": -(2**63)}) is None
    assert first_problem({"a": -(2**63) - 1}) == ("a", str(-(2**63) - 1))
    assert first_problem({"a": True, "b": "NaN", "c": None, "d": 1e308}) is None
