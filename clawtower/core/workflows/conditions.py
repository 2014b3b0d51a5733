"""The `when` / `condition` grammar.

    or    := and ("||" and)*
    and   := eq ("&&" eq)*
    eq    := unary (("==" | "!=" | "<" | "<=" | ">" | ">=") unary[bare ident ok])?
    unary := "!" unary | primary
    primary := "(" or ")" | $step.path | "string" | 'string' | number | true | false | null

`==` is identity for scalars and deep equality for arrays/objects; ordering comparisons are
numeric only (anything non-numeric compares false). Both sides are always evaluated.

Lobster parses and evaluates in one pass, so a reference to an unknown step raises before a
syntax error further right. `parse` takes the set of known step ids and reproduces that order;
`check_workflow_conditions` runs it for every step before the first one runs, with the ids that
will certainly have results by then, so bad syntax never costs a side effect.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any

from .jsvalues import UNDEFINED, FrozenDict, truthy
from .load import Step, Workflow, WorkflowError, loop_vars
from .refs import RefError, Results, parse_step_ref, value_by_path

_REF = re.compile(r"\$([A-Za-z0-9_-]+)\.([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)")
_NUM = re.compile(r"-?\d+(?:\.\d+)?")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_TWO = {"&&": "and", "||": "or", "==": "eq", "!=": "neq", "<=": "lte", ">=": "gte"}
_ONE = {"(": "lparen", ")": "rparen", "<": "lt", ">": "gt", "!": "not"}
_CMP = ("eq", "neq", "lt", "lte", "gt", "gte")


@dataclass(frozen=True)
class Tok:
    type: str
    value: Any = None


class ConditionError(Exception):
    pass


def _tokenize(expr: str) -> list[Tok]:
    bad = ConditionError(f"Unsupported condition: {expr}")
    toks: list[Tok] = []
    i = 0
    n = len(expr)
    while i < n:
        ch = expr[i]
        if ch.isspace():
            i += 1
            continue
        two = expr[i:i + 2]
        if two in _TWO:
            toks.append(Tok(_TWO[two]))
            i += 2
            continue
        if ch in _ONE:
            toks.append(Tok(_ONE[ch]))
            i += 1
            continue
        if ch == "$":
            m = _REF.match(expr, i)
            if not m:
                raise bad
            toks.append(Tok("ref", (m.group(1), m.group(2))))
            i = m.end()
            continue
        if ch in "\"'":
            value, i = _quoted(expr, i, ch, bad)
            toks.append(Tok("str", value))
            continue
        m = _NUM.match(expr, i)
        if m:
            text = m.group(0)
            toks.append(Tok("lit", float(text) if "." in text else int(text)))
            i = m.end()
            continue
        m = _IDENT.match(expr, i)
        if m:
            raw = m.group(0)
            lit = {"true": True, "false": False, "null": None}
            toks.append(Tok("lit", lit[raw]) if raw in lit else Tok("ident", raw))
            i = m.end()
            continue
        raise bad
    return toks


def _quoted(expr: str, start: int, quote: str, bad: ConditionError) -> tuple[str, int]:
    out: list[str] = []
    i = start + 1
    while i < len(expr):
        ch = expr[i]
        if ch == "\\":
            if i + 1 >= len(expr):
                break
            out.append(expr[i + 1])
            i += 2
            continue
        if ch == quote:
            return "".join(out), i + 1
        out.append(ch)
        i += 1
    raise bad


# An AST node: ("ref", (id, path)) | ("lit", v) | ("not", node) | (op, left, right)
Node = tuple[Any, ...]


def parse(expr: str, known: Container[str]) -> Node:
    """Parse a trimmed expression; RefError for a step id not in `known`."""
    toks = _tokenize(expr)
    if not toks:
        raise ConditionError(f"Unsupported condition: {expr}")
    pos = 0

    def bad() -> ConditionError:
        return ConditionError(f"Unsupported condition: {expr}")

    def match(t: str) -> bool:
        nonlocal pos
        if pos < len(toks) and toks[pos].type == t:
            pos += 1
            return True
        return False

    def p_or() -> Node:
        left = p_and()
        while match("or"):
            left = ("or", left, p_and())
        return left

    def p_and() -> Node:
        left = p_eq()
        while match("and"):
            left = ("and", left, p_eq())
        return left

    def p_eq() -> Node:
        left = p_unary(False)
        for op in _CMP:
            if match(op):
                return (op, left, p_unary(True))
        return left

    def p_unary(bare: bool) -> Node:
        if match("not"):
            return ("not", p_unary(bare))
        return p_primary(bare)

    def p_primary(bare: bool) -> Node:
        nonlocal pos
        if pos >= len(toks):
            raise bad()
        tok = toks[pos]
        pos += 1
        if tok.type == "lparen":
            inner = p_or()
            if not match("rparen"):
                raise bad()
            return inner
        if tok.type == "ref":
            sid, path = tok.value
            if sid not in known:
                raise RefError(f"Unknown step reference: {sid}.{path}")
            return ("ref", tok.value)
        if tok.type in ("str", "lit"):
            return ("lit", tok.value)
        if tok.type == "ident" and bare:
            return ("lit", tok.value)
        raise bad()

    node = p_or()
    if pos != len(toks):
        raise bad()
    return node


def js_equal(a: Any, b: Any) -> bool:
    """Object.is for scalars, isDeepStrictEqual for arrays and objects."""
    if isinstance(a, (list, dict)) or isinstance(b, (list, dict)):
        return _deep_equal(a, b)
    return _same(a, b)


def _kind(v: Any) -> str:
    if v is UNDEFINED:
        return "undefined"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _same(a: Any, b: Any) -> bool:
    ka, kb = _kind(a), _kind(b)
    if ka != kb:
        return False
    if ka == "number" and a != a and b != b:  # NaN is NaN under Object.is
        return True
    return bool(a == b) if ka not in ("undefined", "null") else True


def _deep_equal(a: Any, b: Any) -> bool:
    if _kind(a) != _kind(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_deep_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return set(a) == set(b) and all(_deep_equal(a[k], b[k]) for k in a)
    return _same(a, b)


_NUMERIC = re.compile(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|Infinity)")
_RADIX = re.compile(r"0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+")


def js_str_number(text: str) -> float | None:
    """`Number(text)` for a string, or None where JavaScript gives NaN."""
    s = text.strip()
    if not s:
        return 0.0
    if _RADIX.fullmatch(s):
        return float(int(s, 0))
    if _NUMERIC.fullmatch(s):
        return float(s.replace("Infinity", "inf"))
    return None


def _numeric(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return None if v != v else float(v)
    if isinstance(v, str) and v.strip():
        return js_str_number(v)
    return None


_ORDER: dict[str, Callable[[float, float], bool]] = {
    "lt": lambda a, b: a < b, "lte": lambda a, b: a <= b,
    "gt": lambda a, b: a > b, "gte": lambda a, b: a >= b,
}


def evaluate_node(node: Node, results: Results) -> Any:
    op = node[0]
    if op == "lit":
        return node[1]
    if op == "ref":
        sid, path = node[1]
        return value_by_path(results[sid], path)
    if op == "not":
        return not truthy(evaluate_node(node[1], results))
    left = evaluate_node(node[1], results)
    right = evaluate_node(node[2], results)
    if op == "or":
        return truthy(left) or truthy(right)
    if op == "and":
        return truthy(left) and truthy(right)
    if op == "eq":
        return js_equal(left, right)
    if op == "neq":
        return not js_equal(left, right)
    a, b = _numeric(left), _numeric(right)
    if a is None or b is None:
        return False
    return _ORDER[op](a, b)


def evaluate_condition(condition: Any, results: Results) -> bool:
    """Lobster's evaluateCondition: None/absent is true; raises ConditionError or RefError."""
    if condition is None or condition is UNDEFINED:
        return True
    if isinstance(condition, bool):
        return condition
    if not isinstance(condition, str):
        raise ConditionError("Unsupported condition type")
    trimmed = condition.strip()
    if trimmed == "true":
        return True
    if trimmed == "false":
        return False
    return truthy(evaluate_node(parse(trimmed, results), results))


def step_condition(step: Step) -> Any:
    """`step.when ?? step.condition`."""
    when = step.get("when")
    return when if when is not None else step.get("condition")


def _check(condition: Any, known: Container[str]) -> None:
    if condition is None or isinstance(condition, bool):
        return
    if not isinstance(condition, str):
        raise ConditionError("Unsupported condition type")
    trimmed = condition.strip()
    if trimmed not in ("true", "false"):
        parse(trimmed, known)


def _check_strict_ref(value: Any, known: Container[str]) -> None:
    """A `stdin:` or `for_each:` that is one whole `$step.path` resolves strictly: the step
    must have run by then, or the run would fail there (after the steps before it ran)."""
    if isinstance(value, str):
        ref = parse_step_ref(value.strip())
        if ref is not None and ref[0] not in known:
            raise RefError(f"Unknown step reference: {ref[0]}.{ref[1]}")


def check_workflow_conditions(workflow: Workflow, start: int = 0) -> None:
    """Parse every condition, and check every strict step reference (a whole-`$step.path`
    stdin or for_each), from step `start` on, before anything runs (WorkflowError): a
    mistyped id must not cost the side effects of the steps before it, nor leave a failed
    run behind. Checked in the order the runner meets them, so the message is the one a
    run would have ended with. A shared read-only parse (load_workflow_shared) that passed
    from `start` is not checked again: the check depends on the workflow alone."""
    if type(workflow) is not FrozenDict:
        _check_workflow(workflow, start)
        return
    seen = _PASSED.get(id(workflow))
    if seen is not None and seen[0] is workflow and start in seen[1]:
        return
    _check_workflow(workflow, start)
    if seen is None or seen[0] is not workflow:
        if len(_PASSED) >= _PASSED_MAX:
            _PASSED.clear()
        seen = _PASSED[id(workflow)] = (workflow, set())
    seen[1].add(start)


# the read-only parses whose conditions passed, by id (the entry keeps its parse alive, so
# the id is not reused while it is here) with the starts they passed from
_PASSED: dict[int, tuple[Workflow, set[int]]] = {}
_PASSED_MAX = 256


def _check_workflow(workflow: Workflow, start: int) -> None:
    known: set[str] = set()
    try:
        for idx, step in enumerate(workflow["steps"]):
            if idx >= start:
                _check(step_condition(step), known)
                if isinstance(step.get("for_each"), str) and isinstance(step.get("steps"), list):
                    _check_strict_ref(step["for_each"], known)
                    item, index = loop_vars(step)
                    scoped = set(known) | {item, index}
                    for sub in step["steps"]:
                        _check(step_condition(sub), scoped)
                        _check_strict_ref(sub.get("stdin"), scoped)
                        scoped.add(sub["id"])
                else:
                    _check_strict_ref(step.get("stdin"), known)
            known.add(step["id"])
            par = step.get("parallel")
            if isinstance(par, dict):
                known.update(b["id"] for b in par.get("branches", []))
    except (ConditionError, RefError) as exc:
        raise WorkflowError(str(exc)) from None
