"""The trace builder's cheap read of the log (core/traces/rows.py): a payload decoded field by
field holds what its pydantic model holds, and fails the way the model fails."""

from __future__ import annotations

import json

import pytest

from clawtower.core.errors import StoreError
from clawtower.core.events import AgentUsage, TurnFinished, decode_logged
from clawtower.core.traces.rows import LazyPayload, row_event

FINISHED = {"stop_reason": "completed", "rounds": 2, "model_calls": 2, "tool_calls": 1,
            "prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 1,
            "usage": {"agent": "lead", "model": "m", "purpose": "turn", "prompt_tokens": 3,
                      "completion_tokens": 4, "cost_usd": 0}}


def test_a_field_read_holds_what_the_model_holds() -> None:
    raw = json.dumps(FINISHED)  # cost_usd logged as an int; text and error not logged
    model = decode_logged(7, "turn.finished", raw)
    assert isinstance(model, TurnFinished)
    lazy = LazyPayload(7, "turn.finished", raw)
    for name in TurnFinished.model_fields:
        value = getattr(lazy, name)
        assert value == getattr(model, name)
        assert type(value) is type(getattr(model, name)), name
    assert type(lazy.cost_usd) is float and lazy.text == ""  # coerced, defaulted
    assert isinstance(lazy.usage, AgentUsage) and type(lazy.usage.cost_usd) is float
    with pytest.raises(AttributeError):
        lazy.no_such_field  # noqa: B018
    with pytest.raises(AttributeError):
        lazy.rounds = 3


def test_an_unreadable_payload_fails_as_the_log_reader_does() -> None:
    raw = json.dumps({**FINISHED, "prompt_tokens": None})  # a pre-issue-34 NaN
    with pytest.raises(StoreError) as strict:
        decode_logged(9, "turn.finished", raw)
    lazy = LazyPayload(9, "turn.finished", raw)
    assert lazy.rounds == 2  # the readable fields read
    with pytest.raises(StoreError) as err:
        lazy.prompt_tokens  # noqa: B018
    assert str(err.value) == str(strict.value)


def test_a_row_is_read_without_decoding_its_payload() -> None:
    e = row_event({"seq": 3, "ts": 1.5, "entity_id": "T-1", "type": "turn.finished",
                   "actor": "system", "payload": "not json at all"})
    assert (e.seq, e.ts, e.entity_id, e.type, e.actor) == (3, 1.5, "T-1", "turn.finished",
                                                           "system")
    with pytest.raises(StoreError):
        e.payload.rounds  # noqa: B018
