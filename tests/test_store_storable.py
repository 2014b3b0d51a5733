"""Issue 34: the store refuses what it cannot replay. Every write path ends in `Tx.emit`,
which encodes the payload once: NaN and ±Infinity anywhere in it, or an integer a
projection's column cannot hold, are one ValidationError naming the event type and the
field, and the command's whole write rolls back (other commands of the batch land)."""

from __future__ import annotations

import asyncio
import math
import typing

import pytest
from old_release import old_encode, old_release
from pydantic import BaseModel

from clawtower.core import events as ev
from clawtower.core.errors import ValidationError
from clawtower.core.events import NewEvent, Payload, payload_class, registered_types
from clawtower.core.memory.events import MemoryStored
from clawtower.core.memory.service import Memories
from clawtower.core.store.repair import repair
from clawtower.core.store.storable import Unstorable, first_problem


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


# ------------------------------------------------------------------ the repair


async def expiries(store) -> dict[str, float | None]:
    rows = await Memories(store).listing("shared:t")
    return {r["key"]: r["expires_at"] for r in rows}


@pytest.mark.both_backends
async def test_repair_makes_an_old_releases_store_verify_clean_with_one_event(store):
    assert old_encode(MemoryStored(namespace="n", key="k", content="c",
                                   expires_at=math.inf)) == MemoryStored(
        namespace="n", key="k", content="c").model_dump_json()  # the old bytes exactly
    with old_release():
        await store.append([memory("ok", 2e9), memory("nan", math.nan), memory("inf", math.inf),
                            memory("ninf", -math.inf), memory("big", 1e308)])
        await store.append([memory("later", math.inf), memory("later", 3e9)])  # replaced
    before = await store.verify_projections()
    assert before == ["memories: 6 live rows vs 6 replayed; 2 only live, 2 only replayed"]
    # the readers do not crash meanwhile, and print what the log holds (never Infinity)
    assert await expiries(store) == {"ok": 2e9, "nan": None, "inf": None, "ninf": None,
                                     "big": 1e308, "later": 3e9}

    done = await repair(store, by="tester")
    assert [(v.seq, v.type, v.entity_id, v.field, v.was, v.now) for v in done.values] == [
        (3, "memory.stored", "shared:t/inf", "expires_at", "Infinity", None),
        (4, "memory.stored", "shared:t/ninf", "expires_at", "-Infinity", None),
        (5, "memory.stored", "shared:t/big", "expires_at", "1e+308", None)]
    assert done.differences == before and done.remaining == [] and done.rebuilt is None
    assert await store.verify_projections() == []
    assert await expiries(store) == {"ok": 2e9, "nan": None, "inf": None, "ninf": None,
                                     "big": None, "later": 3e9}
    (event,) = [e for e in await store.events_after(0) if e.type == "store.repaired"]
    assert event.seq == done.seq == 8 and event.actor == "tester"
    assert isinstance(event.payload, ev.StoreRepaired)
    assert [v.entity_id for v in event.payload.values] == [v.entity_id for v in done.values]
    assert event.payload.differences == before
    # a replay applies the repair at its place in the log: rebuild gives the same rows
    live = await store.fetchall("SELECT * FROM memories ORDER BY id")
    await store.rebuild_projections()
    assert await store.fetchall("SELECT * FROM memories ORDER BY id") == live
    assert await store.verify_projections() == []
    # the events stay: the log still says 1e308 where it did
    (big,) = [e for e in await store.events_after(0, entity_id="shared:t/big")]
    assert isinstance(big.payload, MemoryStored) and big.payload.expires_at == 1e308
    again = await repair(store, by="tester")
    assert again.seq is None and again.values == [] and await store.last_seq() == 8


@pytest.mark.both_backends
async def test_repair_rebuilds_what_its_handlers_do_not_cover(store):
    await store.append([task({"a": 1}), memory("big", 1e308)])

    def drift(tx):  # a live row the log does not give (no event)
        tx.one("UPDATE tasks SET title='drifted' WHERE id='T-1'")

    await store.execute(drift)
    done = await repair(store, by="tester")
    assert [v.was for v in done.values] == ["1e+308"]
    assert done.differences == ["tasks: 1 live rows vs 1 replayed; 1 only live, 1 only replayed"]
    assert done.rebuilt == 3 and done.remaining == []
    assert await store.verify_projections() == []
    assert (await store.fetchone("SELECT title FROM tasks"))["title"] == "t"
    assert await expiries(store) == {"big": None}


def test_the_repair_reads_as_one_line():
    from clawtower.core.describe import event_summary

    values = [ev.RepairedValue(seq=i, type="memory.stored", entity_id=f"shared:t/k{i}",
                               field="expires_at", was="Infinity") for i in range(1, 8)]
    e = ev.StoredEvent(seq=9, ts=1.0, entity="store", entity_id="store", type="store.repaired",
                       actor="tester", role="operator", payload=ev.StoreRepaired(
                           reason="store repair", values=values, differences=["memories: x"]))
    assert event_summary(e) == (
        "store repaired: 7 value(s) replaced: shared:t/k1 expires_at Infinity (event 1), "
        "shared:t/k2 expires_at Infinity (event 2), shared:t/k3 expires_at Infinity (event 3), "
        "shared:t/k4 expires_at Infinity (event 4), shared:t/k5 expires_at Infinity (event 5)"
        " and 2 more; projections differed")


def test_the_console_prints_a_time_with_no_calendar_date():
    from clawtower.tui.model import fmt_datetime

    assert fmt_datetime(1e308) == "1e+308" and fmt_datetime(-1e308) == "-1e+308"
    assert fmt_datetime(None) == "" and fmt_datetime(2e9).startswith("2033-")


@pytest.mark.both_backends
async def test_an_event_an_old_release_made_unreadable_is_one_line_naming_it(store):
    """An old release logged ±Infinity in a required number as `null`: no repair exists for
    that yet, but verify and the log's readers say which event and field, not a traceback."""
    from clawtower.core.errors import StoreError

    usage = NewEvent(entity_id="s-1", actor="tester", role="system", payload=ev.AgentUsage(
        agent="a", model="m", purpose="p", prompt_tokens=1, completion_tokens=1,
        cost_usd=math.inf))
    with old_release():
        await store.append([task({}), usage])
    expected = (r"^event 2 \(agent\.usage\) in the log cannot be read: cost_usd: Input should"
                r" be a valid number \(it holds null; written by an older release\?\)$")
    with pytest.raises(StoreError, match=expected):
        await store.verify_projections()
    with pytest.raises(StoreError, match=expected):
        await store.events_after(0)
    with pytest.raises(Unstorable):  # this release refuses it
        await store.append([usage])
    # the failed replay left no transaction open (PostgreSQL: on the replica itself)
    assert await store.append([task({}, 2)]) == [3]
