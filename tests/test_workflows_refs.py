"""`${arg}` / `$step.path` substitution, stdin values, env layering and the condition grammar."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clawtower.core.workflows.conditions import (
    ConditionError,
    check_workflow_conditions,
    evaluate_condition,
)
from clawtower.core.workflows.jsvalues import UNDEFINED, js_plain, js_string, to_json
from clawtower.core.workflows.load import WorkflowError, load_workflow
from clawtower.core.workflows.refs import (
    RefError,
    merge_env,
    resolve_args_template,
    resolve_input_value,
    resolve_shell_stdin,
    resolve_template,
)

RESULTS = {
    "a": {"id": "a", "stdout": "hi\n", "json": {"x": [1, 2, {"k": "v"}], "s": "str", "f": 1.0}},
    "g": {"id": "g", "approved": True},
    "sk": {"id": "sk", "skipped": True},
}


def test_args_only_declared_names_are_substituted() -> None:
    assert resolve_args_template("${who} ${nope} ${n}", {"who": "team", "n": 2.0}) == (
        "team ${nope} 2")
    assert js_string([1, "a", None]) == "1,a,"
    assert js_string({"a": 1}) == "[object Object]"


def test_step_refs_render_like_lobster() -> None:
    t = "$a.stdout|$a.json.x.1|$a.json.x.2|$a.json.f|$a.json.nope|$g.approved|$a.approved|"
    t += "$a.skipped|$nope.json|$a.json.x.9"
    assert resolve_template(t, {}, RESULTS) == (
        'hi\n|2|{"k":"v"}|1||true|false|false|$nope.json|')


def test_stdin_single_ref_is_the_value_and_strict() -> None:
    assert resolve_input_value("$a.json.x", {}, RESULTS) == [1, 2, {"k": "v"}]
    assert resolve_input_value(" $a.json.nope ", {}, RESULTS) is UNDEFINED
    assert resolve_shell_stdin("$a.json.x", {}, RESULTS) == '[1,2,{"k":"v"}]'
    assert resolve_shell_stdin("say $a.json.s", {}, RESULTS) == "say str"
    assert resolve_shell_stdin({"k": 1}, {}, RESULTS) == '{"k":1}'
    with pytest.raises(RefError, match=r"Unknown step reference: b\.json"):
        resolve_input_value("$b.json", {}, RESULTS)


def test_env_layers_in_order() -> None:
    env = merge_env({"PATH": "/bin", "KEEP": "p"}, {"W": "${who}", "KEEP": "w"},
                    {"KEEP": "$a.json.s", "N": 5}, {"who": "team", "my-arg x": 1}, RESULTS)
    assert env["PATH"] == "/bin"
    assert env["LOBSTER_ARGS_JSON"] == '{"who":"team","my-arg x":1}'
    assert env["LOBSTER_ARG_WHO"] == "team"
    assert env["LOBSTER_ARG_MY_ARG_X"] == "1"
    assert env["W"] == "team"
    assert env["KEEP"] == "str"  # the step's env wins
    assert "N" not in env  # non-string values are ignored


def test_json_output_matches_json_stringify() -> None:
    assert to_json({"a": 1.0, "b": [0.5, 1e21], "c": "é"}) == '{"a":1,"b":[0.5,1e+21],"c":"é"}'


@pytest.mark.parametrize(("expr", "expected"), [
    ("$a.json.x.0 == 1", True),
    ("$a.json.x.0 == '1'", False),
    ("$a.json.s == str", True),  # a bare identifier on the right is a string
    ('$a.json.s != "str"', False),
    ("$a.json.x.1 > 1 && $a.json.x.1 <= 2", True),
    ("$a.json.s > 1", False),  # non-numeric ordering is false
    ("!$g.approved || $sk.skipped", True),
    ("($a.json.x == $a.json.x) && $a.json.x.2 == $a.json.x.2", True),
    ("$a.json.nope == null", False),  # undefined is not null
    ("$a.json.f == 1", True),
    ("true", True),
    (" false ", False),
])
def test_condition_grammar(expr: str, expected: bool) -> None:
    assert evaluate_condition(expr, RESULTS) is expected


@pytest.mark.parametrize("expr", ["$a.json.x ==", "(true", "foo", "$a.json.x = 1", "'open",
                                  "1 2", "$a"])
def test_bad_condition_syntax(expr: str) -> None:
    with pytest.raises(ConditionError, match="Unsupported condition"):
        evaluate_condition(expr, RESULTS)


def test_unknown_ref_is_reported_before_a_later_syntax_error() -> None:
    with pytest.raises(RefError, match=r"Unknown step reference: zz\.json"):
        evaluate_condition("$zz.json == (", RESULTS)
    with pytest.raises(ConditionError):
        evaluate_condition(5, RESULTS)
    assert evaluate_condition(None, RESULTS) is True
    assert evaluate_condition(False, RESULTS) is False


def test_conditions_are_checked_before_any_step_runs(tmp_path: Path) -> None:
    wf = tmp_path / "wf.lobster"
    wf.write_text("steps:\n  - id: a\n    run: echo\n  - id: b\n    run: echo\n"
                  "    when: $a.json ==\n")
    with pytest.raises(WorkflowError, match=r"Unsupported condition: \$a.json =="):
        check_workflow_conditions(load_workflow(wf))
    wf.write_text("steps:\n  - id: a\n    run: echo\n    when: $b.approved\n"
                  "  - id: b\n    approval: true\n")
    with pytest.raises(WorkflowError, match=r"Unknown step reference: b\.approved"):
        check_workflow_conditions(load_workflow(wf))
    wf.write_text("steps:\n  - id: p\n    parallel:\n      branches: [{id: br, run: x}]\n"
                  "  - id: l\n    for_each: $p.json\n    steps:\n"
                  "      - id: s\n        run: echo\n        when: $br.json && $item.json\n"
                  "      - id: t\n        run: echo\n        when: $s.stdout\n")
    check_workflow_conditions(load_workflow(wf))


def test_javascript_numbers_keys_and_string_cuts() -> None:
    """What Lobster's envelopes show comes from JSON.stringify and String(): numbers laid out
    by Number::toString (checked against Node on 12,022 doubles during development), integer
    keys first, integers beyond 2**53 as doubles, previews cut in UTF-16 units."""
    from clawtower.core.workflows.jsvalues import js_number, js_prefix, parse_json, to_json

    assert [js_number(x) for x in (1e-6, 1e-7, 1e21, 1e20, 0.1, -0.0, 2**53 + 1)] == [
        "0.000001", "1e-7", "1e+21", "100000000000000000000", "0.1", "0", "9007199254740992"]
    assert to_json(parse_json('{"b":1,"a":2,"10":3,"2":4,"big":12345678901234567890}')) == (
        '{"2":4,"10":3,"b":1,"a":2,"big":12345678901234567000}')
    assert to_json({"x": [1.0, 1e-6, float("nan")]}, 2) == (
        '{\n  "x": [\n    1,\n    0.000001,\n    null\n  ]\n}')
    assert js_prefix("ab\U0001F600c", 3) == "ab"  # never half a character
    assert js_prefix("ab\U0001F600c", 4) == "ab\U0001F600"


def _same(a: object, b: object) -> bool:
    """Equal, of the same types all the way down (1 and 1.0 differ), NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)
    if type(a) is not type(b):
        return False
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(),
                    st.integers(min_value=-2**70, max_value=2**70), st.floats(), st.text(),
                    st.just(UNDEFINED))
_KEYS = st.one_of(st.text(max_size=4), st.integers(min_value=0, max_value=2**33).map(str),
                  st.sampled_from(["01", "0", "4294967294", "4294967295", "-1", "¹", "٣"]))
_VALUES = st.recursive(_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner),
    st.dictionaries(_KEYS, inner, max_size=4),
    st.dictionaries(st.integers(0, 20), inner, max_size=3)), max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(_VALUES.filter(lambda v: v is not UNDEFINED))
def test_js_plain_is_the_stringify_round_trip(value: object) -> None:
    """js_plain (a gate's request, subject and context normalised in its write, issue 36)
    is exactly json.loads(to_json(value)): key order, dropped undefined members, numbers as
    JavaScript holds them, types included."""
    assert _same(js_plain(value), json.loads(to_json(value)))


def test_unicode_digit_keys_are_not_array_indexes() -> None:
    """`"¹".isdigit()` is true in Python: such a key stays in its place (it once crashed
    JSON.stringify's key ordering with int("¹"))."""
    value = {"b": 1, "¹": 2, "10": 3, "2": 4}
    assert to_json(value) == '{"2":4,"10":3,"b":1,"¹":2}'
    assert list(js_plain(value)) == ["2", "10", "b", "¹"]
    with pytest.raises(ValueError):
        js_plain(UNDEFINED)  # not JSON, as json.loads("undefined") refused
