"""Validate an input gate's response with `jsonschema`, worded like Lobster's Ajv.

Lobster reports Ajv's first error (allErrors: false): `... at <instancePath>: <message>`.
Ajv checks keywords in a fixed order (untyped keywords, then number, string, array and object
ones), stops at the first failing property or item, and for anyOf/oneOf reports the first
branch's first error. We collect jsonschema's errors and pick the one Ajv would have met first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import jsonschema

from .jsvalues import js_number, to_json

_UNTYPED = ["const", "enum", "not", "anyOf", "oneOf", "allOf", "if", "then", "else"]
_GROUPS: dict[str, list[str]] = {
    "number": ["maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum", "multipleOf"],
    "string": ["maxLength", "minLength", "pattern", "format"],
    "array": ["maxItems", "minItems", "uniqueItems", "additionalItems", "items", "contains"],
    "object": ["maxProperties", "minProperties", "required", "propertyNames",
               "additionalProperties", "dependencies", "properties", "patternProperties"],
}
_GROUP_ORDER = ["number", "string", "array", "object"]


def _keyword_rank(schema: Any, keyword: str) -> int:
    order: list[str] = list(_UNTYPED)
    types = schema.get("type") if isinstance(schema, dict) else None
    tlist = [types] if isinstance(types, str) else list(types or [])
    single = tlist[0] if len(tlist) == 1 else None
    if single == "integer":
        single = "number"
    type_first = bool(tlist) and not (
        single in _GROUPS and any(k in schema for k in _GROUPS[single]))
    if type_first:
        order.insert(0, "type")
    for g in _GROUP_ORDER:
        order.extend(_GROUPS[g])
        if not type_first and single == g:
            order.append("type")
    if keyword == "$ref":
        return -1
    return order.index(keyword) if keyword in order else len(order)


def _error_key(error: jsonschema.ValidationError, root: Any) -> list[Any]:
    """Walk the error's schema path, ranking each step as Ajv would reach it."""
    key: list[Any] = []
    schema: Any = root
    spath = deque(error.absolute_schema_path)
    ipath = deque(error.absolute_path)
    while spath:
        kw = spath.popleft()
        if not isinstance(schema, dict):
            break
        key.append(_keyword_rank(schema, str(kw)))
        sub = schema.get(kw)
        if kw in ("properties", "patternProperties", "dependencies") and spath:
            name = spath.popleft()
            names = list(sub) if isinstance(sub, dict) else []
            key.append(names.index(name) if name in names else 0)
            if kw != "dependencies" and ipath:
                ipath.popleft()
            schema = sub.get(name) if isinstance(sub, dict) else None
        elif kw in ("items", "additionalItems") and isinstance(sub, list) and spath:
            idx = spath.popleft()
            key.append(idx)
            if ipath:
                ipath.popleft()
            schema = sub[idx] if isinstance(idx, int) and idx < len(sub) else None
        elif kw in ("items", "additionalItems", "additionalProperties", "contains"):
            if ipath and spath:
                key.append(ipath.popleft())
            schema = sub
        elif kw in ("anyOf", "oneOf", "allOf") and spath:
            idx = spath.popleft()
            key.append(idx)
            schema = sub[idx] if isinstance(sub, list) and idx < len(sub) else None
        elif kw in ("not", "if", "then", "else"):
            schema = sub
        else:
            break
    return key


def _first(errors: Iterable[jsonschema.ValidationError], root: Any) -> (
        jsonschema.ValidationError | None):
    return min(errors, key=lambda e: (_error_key(e, root), [str(p) for p in e.absolute_path]),
               default=None)


def _message(error: jsonschema.ValidationError) -> tuple[str, str]:
    """(instancePath or "/", message) of Ajv's first error: anyOf/oneOf report the first
    branch's first error."""
    path, message = _ajv_errors(error)[0]
    return path or "/", message


def _ajv_errors(error: jsonschema.ValidationError) -> list[tuple[str, str]]:
    """The errors Ajv lists for this one (allErrors off): each anyOf/oneOf branch's first
    error, then the anyOf/oneOf error itself."""
    out: list[tuple[str, str]] = []
    if error.validator in ("anyOf", "oneOf") and error.context:
        for i, branch in enumerate(error.validator_value):
            sub = [c for c in error.context
                   if c.relative_schema_path and c.relative_schema_path[0] == i]
            best = _first(sub, branch)
            if best is not None:
                out += _ajv_errors(best)
    out.append(_plain(error))
    return out


def schema_problem(schema: Any) -> str | None:
    """Why Ajv would refuse to compile `schema` (its meta-schema check), or None."""
    if schema is None:
        return "Cannot read properties of null (reading '$id')"  # what Ajv throws, verbatim
    if not isinstance(schema, (dict, bool)):
        return ("schema must be object or boolean" if not isinstance(schema, list)
                else "schema is invalid: data must be object,boolean")
    meta = jsonschema.Draft7Validator(jsonschema.Draft7Validator.META_SCHEMA)
    best = _first(meta.iter_errors(schema), jsonschema.Draft7Validator.META_SCHEMA)
    if best is None:
        return None
    listed = ", ".join(f"data{path} {message}" for path, message in _ajv_errors(best))
    return f"schema is invalid: {listed}"


def _plain(error: jsonschema.ValidationError) -> tuple[str, str]:
    """(instancePath, Ajv's message) for this error alone."""
    kw = error.validator
    path = "".join("/" + str(p).replace("~", "~0").replace("/", "~1")
                   for p in error.absolute_path)
    v = error.validator_value
    inst = error.instance
    msgs: dict[str, str] = {
        "required": "",
        "type": f"must be {','.join(map(str, v)) if isinstance(v, list) else v}",
        "enum": "must be equal to one of the allowed values",
        "const": "must be equal to constant",
        "minimum": f"must be >= {_num(v)}",
        "maximum": f"must be <= {_num(v)}",
        "exclusiveMinimum": f"must be > {_num(v)}",
        "exclusiveMaximum": f"must be < {_num(v)}",
        "multipleOf": f"must be multiple of {_num(v)}",
        "minLength": f"must NOT have fewer than {_num(v)} characters",
        "maxLength": f"must NOT have more than {_num(v)} characters",
        "minItems": f"must NOT have fewer than {_num(v)} items",
        "maxItems": f"must NOT have more than {_num(v)} items",
        "minProperties": f"must NOT have fewer than {_num(v)} properties",
        "maxProperties": f"must NOT have more than {_num(v)} properties",
        "additionalProperties": "must NOT have additional properties",
        "additionalItems": f"must NOT have more than {_num(len(v)) if isinstance(v, list) else 0}"
                           " items",
        "pattern": f'must match pattern "{v}"',
        "format": f'must match format "{v}"',
        "uniqueItems": _unique_message(inst),
        "anyOf": "must match a schema in anyOf",
        "oneOf": "must match exactly one schema in oneOf",
        "not": "must NOT be valid",
        "contains": "must contain at least 1 valid item(s)",
        "propertyNames": "property name must be valid",
        "dependencies": _dependency_message(error),
        "if": 'must match "then" schema',
    }
    if kw == "required":
        missing = error.message.split("'")[1] if "'" in error.message else ""
        return path, f"must have required property '{missing}'"
    if kw == "false" or error.validator is None:
        return path, "boolean schema is false"
    return path, msgs.get(str(kw), str(error.message))


def _num(v: Any) -> str:
    return js_number(v) if isinstance(v, (int, float)) else str(v)


def _unique_message(inst: Any) -> str:
    if not isinstance(inst, list):
        return "must NOT have duplicate items"
    seen: dict[str, int] = {}
    for i in range(len(inst) - 1, -1, -1):
        k = to_json(inst[i])
        if k in seen:
            return f"must NOT have duplicate items (items ## {seen[k]} and {i} are identical)"
        seen[k] = i
    return "must NOT have duplicate items"


def _dependency_message(error: jsonschema.ValidationError) -> str:
    msg = str(error.message)  # "'b' is a dependency of 'a'"
    parts = msg.split("'")
    if len(parts) >= 4:
        return f"must have property {parts[1]} when property {parts[3]} is present"
    return msg


def first_error(schema: Any, instance: Any) -> tuple[str, str] | None:
    """Ajv's (instancePath or "/", message) for the first error, or None when valid."""
    validator = jsonschema.Draft7Validator(schema)
    best = _first(validator.iter_errors(instance), schema)
    if best is None:
        return None
    return _message(best)


def all_errors(schema: Any, instance: Any) -> list[tuple[str, str]]:
    """Every (instancePath or "/", message), Ajv's first error first, then the others in the
    order Ajv would meet them; [] when valid."""
    validator = jsonschema.Draft7Validator(schema)
    ranked = sorted(validator.iter_errors(instance),
                    key=lambda e: (_error_key(e, schema), [str(p) for p in e.absolute_path]))
    out: list[tuple[str, str]] = []
    for e in ranked:
        m = _message(e)
        if m not in out:
            out.append(m)
    return out


def validate_response(schema: Any, response: Any, step_id: str) -> str | None:
    """Lobster's error text for a response that fails its schema, or None. Lobster reports
    Ajv's first error only; its words come first, unchanged, and every other error follows
    on the same line as `; also at PATH: MESSAGE` (docs/workflow-deviations.md, 12)."""
    errors = all_errors(schema, response)
    if not errors:
        return None
    (path, message), rest = errors[0], errors[1:]
    also = "".join(f"; also at {p}: {m}" for p, m in rest)
    return (f"Workflow input step {step_id} response failed schema validation at {path}:"
            f" {message}{also}")
