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
from typing import Annotated, Any

from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import from_json

from ..events import Payload, decode_logged, payload_class

_PLAIN = (str, int, bool)


@cache
def _field(cls: type[Payload], name: str) -> tuple[type | None, TypeAdapter[Any]]:
    """`cls`'s field `name`: its type when a value of exactly that type is kept as is (a
    plain str, int or bool), and its validator."""
    f = cls.model_fields[name]
    ann: Any = f.annotation
    plain = ann if ann in _PLAIN and not f.metadata else None
    return plain, TypeAdapter(Annotated[ann, *f.metadata] if f.metadata else ann)


class LazyPayload:
    """A payload's fields, each decoded on first read (then kept)."""

    def __init__(self, seq: int, type_name: str, raw: str) -> None:
        self.__dict__["_seq"] = seq
        self.__dict__["_type"] = type_name
        self.__dict__["_raw"] = raw
        self.__dict__["_data"] = None

    def _strict(self) -> Payload:
        return decode_logged(self._seq, self._type, self._raw)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        cls = payload_class(self._type)
        field = cls.model_fields.get(name)
        if field is None:
            raise AttributeError(f"{cls.__name__} has no field {name!r}")
        data = self._data
        if data is None:
            try:
                data = from_json(self._raw)
            except ValueError:
                return getattr(self._strict(), name)
            self.__dict__["_data"] = data
        if name not in data:
            value = field.get_default(call_default_factory=True)
        else:
            value = data[name]
            plain, adapter = _field(cls, name)
            if type(value) is not plain:
                try:
                    value = adapter.validate_python(value)
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
