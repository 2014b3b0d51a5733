"""The log as the builder reads it, cheaply: rows, with payloads decoded field by field.

Reading a large log through `events_after` decodes every payload into its pydantic model
(and every row into a StoredEvent): most of the time of `traces export`, for fields the
spans never look at. Here a row is a `LogEvent` (the five columns the builder reads) and its
payload a `LazyPayload`: the JSON is parsed on the first attribute read (never, for the many
events no span is made of), and each field read is validated by its own field's type, so a
value is the one the model would hold (an int logged for a float field is a float, a nested
model is that model, a field an older release did not log has its default). A payload the
model cannot read raises what `events_after` would (decode_logged's StoreError)."""

from __future__ import annotations

from functools import cache
from types import UnionType
from typing import Annotated, Any, get_args

from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError
from pydantic.fields import FieldInfo
from pydantic_core import from_json

from ..events import Payload, decode_logged, payload_class

_PLAIN = (str, int, bool, float)
_NONE = type(None)


class _Field:
    """One field of a payload class: the value types kept as they are (a plain str, int,
    bool or float, or None where the field allows it; anything else is validated), and its
    validator, built on first need."""

    __slots__ = ("_adapter", "info", "keep")

    def __init__(self, info: FieldInfo) -> None:
        self.info = info
        ann: Any = info.annotation
        args = get_args(ann) if isinstance(ann, UnionType) else ()
        if info.metadata:
            self.keep: tuple[type, ...] = ()
        elif ann in _PLAIN:
            self.keep = (ann,)
        elif len(args) == 2 and _NONE in args and all(a in _PLAIN or a is _NONE for a in args):
            self.keep = args
        else:
            self.keep = ()
        self._adapter: TypeAdapter[Any] | None = None

    def validate(self, value: Any) -> Any:
        if self._adapter is None:
            ann: Any = self.info.annotation
            self._adapter = TypeAdapter(Annotated[ann, *self.info.metadata]
                                        if self.info.metadata else ann)
        return self._adapter.validate_python(value)


@cache
def _fields(type_name: str) -> dict[str, _Field]:
    return {name: _Field(info)
            for name, info in payload_class(type_name).__pydantic_fields__.items()}


class LazyPayload:
    """A payload's fields, each decoded on first read (then kept)."""

    def __init__(self, seq: int, type_name: str, raw: str) -> None:
        d = self.__dict__
        d["_seq"], d["_type"], d["_raw"], d["_data"] = seq, type_name, raw, None

    def _strict(self) -> Payload:
        return decode_logged(self._seq, self._type, self._raw)

    def __getattr__(self, name: str) -> Any:
        f = _fields(self._type).get(name) if name[0] != "_" else None
        if f is None:
            raise AttributeError(f"{self._type} has no field {name!r}")
        data = self._data
        if data is None:
            try:
                data = from_json(self._raw)
            except ValueError:
                return getattr(self._strict(), name)
            self.__dict__["_data"] = data
        if name not in data:
            value = f.info.get_default(call_default_factory=True)
        else:
            value = data[name]
            if type(value) not in f.keep:
                try:
                    value = f.validate(value)
                except PydanticValidationError:
                    return getattr(self._strict(), name)  # raises the log's own error
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a payload is read-only")


class LogEvent:
    """One row of the log: what the trace builder reads of an event."""

    __slots__ = ("actor", "entity_id", "payload", "seq", "ts", "type")

    def __init__(self, seq: int, ts: float, entity_id: str, type: str, actor: str,
                 payload: Any) -> None:
        self.seq = seq
        self.ts = ts
        self.entity_id = entity_id
        self.type = type
        self.actor = actor
        self.payload = payload


SELECT = ("SELECT seq, ts, entity_id, type, actor, payload FROM events WHERE seq > ?"
          " ORDER BY seq LIMIT ?")


def row_event(r: dict[str, Any]) -> LogEvent:
    return LogEvent(r["seq"], r["ts"], r["entity_id"], r["type"], r["actor"],
                    LazyPayload(r["seq"], r["type"], r["payload"]))


__all__ = ["SELECT", "LazyPayload", "LogEvent", "row_event"]
