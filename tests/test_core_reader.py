"""core/reader.py: one bounded reader for what users import or configure (issue 34 parts 3
and 4). Every refusal is one line naming the file and the line; nothing recurses into a
hostile file."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from clawtower.core.errors import ValidationError
from clawtower.core.reader import (
    MAX_JSON5_BYTES,
    check_fields,
    parse_json,
    parse_json5,
    parse_json_lines,
    read_json,
    read_json5,
    read_json_lines,
)
from clawtower.core.safe_yaml import loads as yaml_loads
from clawtower.core.workflows.yaml12 import loads as yaml12_loads


def _refused(fn: object, *args: object) -> str:
    with pytest.raises(ValidationError) as got:
        fn(*args)  # type: ignore[operator]
    msg = str(got.value)
    assert "\n" not in msg and "set_int_max_str_digits" not in msg, msg
    return msg


@pytest.mark.parametrize(("text", "why"), [
    ('{"a": 1,\n "a": 2}', "f.json: line 2: duplicate key 'a'"),
    ('{"a":\n NaN}', "f.json: line 2: NaN is not a number"),
    ('{"a": Infinity}', "line 1: Infinity is not a number"),
    ('{"a": -Infinity}', "line 1: -Infinity is not a number"),
    ('{"a": 1e400}', "line 1: number 1e400 is out of range"),
    ('{"a": -1e400}', "number -1e400 is out of range"),
    ("[" * 5000, "f.json: line 1: nested deeper than 64 levels"),
    ("\n\n" + "1" * 5000, "f.json: line 3: a number of 5000 digits (at most 100)"),
    ("{nope", "f.json: line 1: invalid JSON"),
])
def test_json_refusals_name_the_file_and_line(text: str, why: str) -> None:
    assert why in _refused(parse_json, text, "f.json")


def test_json_keeps_good_values_and_brackets_in_strings() -> None:
    assert parse_json('{"a": "[[[[{{", "b": [1, 2.5, null, true]}', "f.json") == {
        "a": "[[[[{{", "b": [1, 2.5, None, True]}
    assert parse_json('{"big": 1e308, "n": 9223372036854775807}', "f") == {
        "big": 1e308, "n": 9223372036854775807}


def test_json_lines_name_the_line() -> None:
    text = '{"a": 1}\n\n{"b": 2, "b": 3}\n'
    assert "m.jsonl: line 3: duplicate key 'b'" in _refused(parse_json_lines, text, "m.jsonl")
    deep = '{"a": 1}\n' + "[" * 5000 + "\n"
    assert "m.jsonl: line 2: nested deeper than 64" in _refused(parse_json_lines, deep,
                                                                  "m.jsonl")
    assert "m.jsonl: line 2: invalid JSON" in _refused(parse_json_lines, "{}\n{oops",
                                                         "m.jsonl")
    assert parse_json_lines('{"a": 1}\n\n[2]\n', "m") == [(1, {"a": 1}), (3, [2])]


@pytest.mark.parametrize(("text", "why"), [
    ("{a: 1,\n a: 2}", "f.json5: line 2: duplicate key 'a'"),
    ("[" * 50_000, "f.json5: line 1: nested deeper than 64 levels"),
    ("// c\n{a: Infinity}", "f.json5: line 2: Infinity is not a number"),
    ("{a: NaN}", "NaN is not a number"),
    ("{a: 0x" + "f" * 200 + "}", "a number of 202 digits"),
    ("{a: " + "9" * 5000 + "}", "a number of 5000 digits"),
    ("{a: 1,\n b: [1, }", "f.json5: line 2: not valid JSON5 (Unexpected"),
])
def test_json5_refusals(text: str, why: str) -> None:
    t0 = time.monotonic()
    assert why in _refused(parse_json5, text, "f.json5")
    assert time.monotonic() - t0 < 5


def test_json5_skips_brackets_in_strings_and_comments() -> None:
    text = "// [[[[\n/* {{{{ */ {a: '[[[[', b: \"{{\", c: [1, 2,], d: 0x10, e: +1, f: .5}"
    assert parse_json5(text, "f") == {"a": "[[[[", "b": "{{", "c": [1, 2], "d": 16, "e": 1,
                                      "f": 0.5}


@pytest.mark.parametrize("text", ["a: 1\nb: " + "1" * 5000, "a: .inf", "a: -.Inf", "a: .nan"])
def test_yaml_numbers_are_bounded(text: str) -> None:
    for load in (yaml_loads, yaml12_loads):
        msg = _refused(load, text, "f.yaml")
        assert msg.startswith("f.yaml: line "), msg


def test_yaml12_float_overflow_is_refused() -> None:
    assert "f.yaml: line 2: number 1e400 is not finite" in _refused(
        yaml12_loads, "x:\n  y: 1e400", "f.yaml")


def test_files_are_read_bounded_before_parsing(tmp_path: Path) -> None:
    fifo = tmp_path / "f.json5"
    os.mkfifo(fifo)
    assert "not a regular file" in _refused(read_json5, fifo)
    t0 = time.monotonic()
    assert f"/dev/zero: larger than {MAX_JSON5_BYTES} bytes" in _refused(read_json5,
                                                                         "/dev/zero")
    assert "/dev/zero: larger than" in _refused(read_json, "/dev/zero")
    assert "/dev/zero: larger than" in _refused(read_json_lines, "/dev/zero")
    assert time.monotonic() - t0 < 5
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(60 << 20)  # 60 MB (sparse): refused after the first MiB
    t0 = time.monotonic()
    assert "big.json: larger than" in _refused(read_json, big)
    assert time.monotonic() - t0 < 5


def test_unknown_fields_get_a_did_you_mean() -> None:
    known = ["namespace", "key", "content", "category", "expires_at"]
    assert _refused(check_fields, {"key": "k", "expires": 1}, known, "m.jsonl: line 3") \
        == "m.jsonl: line 3: unknown field 'expires' (did you mean 'expires_at'?)"
    assert "unknown field 'zzz' (known: category, content" in _refused(
        check_fields, {"zzz": 1}, known, "m")
    check_fields({"key": "k"}, known, "m")


def test_schema_problem_finds_the_fields_of_the_nested_object() -> None:
    import pydantic

    from clawtower.core.agents.config import ProviderConfig
    from clawtower.core.reader import schema_problem
    from clawtower.core.tasks.spec import TaskSpec

    def problem(model: type[pydantic.BaseModel], data: object) -> tuple[str, str]:
        with pytest.raises(pydantic.ValidationError) as got:
            model.model_validate(data)
        return schema_problem(got.value, model)

    # a misspelt required field is reported as the unknown one, not as missing
    assert problem(ProviderConfig, {"kind": "openai", "bse_url": "x"}) == (
        "bse_url", "unknown field (did you mean 'base_url'?)")
    assert problem(TaskSpec, {"goal": "g", "side_effects": [{"kind": "k", "description": "d",
                                                            "traget": "t"}]}) == (
        "side_effects.0.traget", "unknown field (did you mean 'target'?)")
    assert problem(TaskSpec, {"goal": ""})[0] == "goal"  # other problems pass through


def test_a_json_config_names_the_line_of_a_duplicate(tmp_path: Path) -> None:
    from clawtower.core.safe_yaml import load_file

    f = tmp_path / "spec.json"
    f.write_text('{"goal": "a",\n "goal": "b"}')
    assert f"{f}: line 2: duplicate key 'goal'" == _refused(load_file, f)
