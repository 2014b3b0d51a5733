"""A bounded YAML/JSON loader for files users and packages hand us.

`yaml.safe_load` still allows denial of service (alias bombs, merge-key bombs, deep nesting),
so this loader refuses anchors/aliases and caps bytes, nodes and depth, and reports the file
and line of every problem.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from .errors import ValidationError
from .limits import (
    MAX_FILE_BYTES,
    MAX_NUMBER_CHARS,
    check_tree,
    printable,
    read_text,
)

MAX_BYTES = MAX_FILE_BYTES
MAX_NODES = 100_000
MAX_DEPTH = 64
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


class _BoundedLoader(yaml.SafeLoader):
    nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise yaml.YAMLError(f"line {mark.line + 1}: aliases are not allowed")
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if getattr(event, "anchor", None):
            raise yaml.YAMLError(f"line {event.start_mark.line + 1}: anchors are not allowed")
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise yaml.YAMLError(f"line {event.start_mark.line + 1}: more than {MAX_NODES} nodes")
        return super().compose_node(parent, index)

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        """Numbers bounded as core/limits' JSON hooks bound them: at most MAX_NUMBER_CHARS
        characters (Python refuses over 4,300 digits with advice no user can follow), and
        finite (`.inf`, `.nan` and 1e400 are not a value any field takes)."""
        if node.tag in _NUMBER_TAGS and len(str(node.value)) > MAX_NUMBER_CHARS:
            raise yaml.YAMLError(f"line {node.start_mark.line + 1}: a number of"
                                 f" {len(str(node.value))} characters (at most"
                                 f" {MAX_NUMBER_CHARS})")
        value = super().construct_object(node, deep=deep)
        if isinstance(value, float) and not math.isfinite(value):
            raise yaml.YAMLError(f"line {node.start_mark.line + 1}: number"
                                 f" {printable(str(node.value), 24)} is not finite")
        return value

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """A key given twice is an error (YAML requires unique keys; PyYAML keeps the last)."""
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    dup = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: PyYAML reports it itself
                    continue
                if dup:
                    raise yaml.YAMLError(f"line {key_node.start_mark.line + 1}: duplicate key"
                                         f" {key!r}")
        return super().construct_mapping(node, deep=deep)


# node events: what the composer counts (an alias too: it is refused, but after the count)
_NODE_EVENTS = (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent,
                yaml.AliasEvent)


def _prescan(text: str) -> None:
    """Refuse a document of more than MAX_NODES nodes, or nested deeper than MAX_DEPTH,
    from libyaml's event stream, before the pure-Python composer builds any node: composing
    100,000 nodes in Python takes seconds (20 s on a busy machine), and 50,000 open brackets
    recursed until Python's own limit (6 s on a busy machine), where libyaml's parser takes a
    fraction of that. Only what check_tree would refuse is refused here: a collection opened
    MAX_DEPTH deep is already too deep. Anything else it finds (a syntax error) is left to
    the bounded loader, which reports it with its line; without libyaml the composer's own
    count (compose_node) and check_tree are the bounds."""
    cparser = getattr(yaml, "CBaseLoader", None)  # libyaml's parser (its events only)
    if cparser is None:
        return
    nodes = depth = 0
    parser = cparser(text)
    try:
        while (event := parser.get_event()) is not None:
            if isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            elif isinstance(event, _NODE_EVENTS):
                nodes += 1
                if nodes > MAX_NODES:
                    raise ValidationError(f"{_line(event.start_mark)}more than {MAX_NODES}"
                                          " nodes")
                if isinstance(event, yaml.CollectionStartEvent):
                    depth += 1
                    if depth > MAX_DEPTH:
                        raise ValidationError(f"{_line(event.start_mark)}nested deeper"
                                              f" than {MAX_DEPTH} levels")
    except yaml.MarkedYAMLError as exc:
        if exc.problem == "exceeded maximum nesting depth":  # libyaml's own bound (1,000)
            raise ValidationError(f"{_line(exc.problem_mark)}nested deeper than {MAX_DEPTH}"
                                  " levels") from None
        return
    except yaml.YAMLError:
        return
    finally:
        parser.dispose()


def _line(mark: Any) -> str:
    return f"line {mark.line + 1}: " if mark is not None else ""


def loads(text: str, source: str, loader: type[_BoundedLoader] | None = None) -> Any:
    """Parse YAML (a superset of JSON) from `text`; `source` names it in errors. `loader`:
    a subclass of the bounded loader with other resolvers (e.g. YAML 1.2's core schema)."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise ValidationError(f"{source}: larger than {MAX_BYTES} bytes")
    if "\x00" in text:
        raise ValidationError(f"{source}: contains a NUL character")
    try:
        _prescan(text)
    except ValidationError as exc:
        raise ValidationError(f"{source}: {exc}") from None
    try:
        parser = (loader or _BoundedLoader)(text)
        try:
            value = parser.get_single_data()
        finally:
            parser.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}: " if mark else ""
        raise ValidationError(f"{source}: {where}invalid YAML ({exc.problem or exc})") from None
    except yaml.YAMLError as exc:
        raise ValidationError(f"{source}: {exc}") from None
    except (RecursionError, ValueError, TypeError) as exc:
        raise ValidationError(f"{source}: unreadable document ({type(exc).__name__})") from None
    return check_tree(value, source, MAX_DEPTH)


def load_file(path: str | Path) -> Any:
    """A YAML or JSON file, read incrementally up to MAX_BYTES (core/limits.py). A `.json`
    file is strict JSON (core/reader.py): duplicate keys and NaN are refused, as YAML's
    duplicates are."""
    p = Path(path)
    text = read_text(p, MAX_BYTES)
    if p.suffix.lower() == ".json":
        from .reader import parse_json  # the bounded reader's: errors give the line

        return parse_json(text, str(p))
    return loads(text, str(p))
