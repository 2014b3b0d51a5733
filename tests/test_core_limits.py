"""core/limits.py, the named maximums and the checks behind the CLI's boundary, and the
workflow loader's use of them (bad files refused before a run is recorded)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clawtower.core.errors import ValidationError
from clawtower.core.limits import (
    MAX_RETRY_ATTEMPTS,
    MAX_SUBWORKFLOW_DEPTH,
    check_id,
    check_int,
    check_text,
    parse_json,
    printable,
    read_file,
    read_text,
)
from clawtower.core.workflows.conditions import check_workflow_conditions
from clawtower.core.workflows.load import WorkflowError, load_workflow


@given(st.text())
def test_printable_is_always_one_writable_line(text: str) -> None:
    out = printable(text, 10_000)
    assert len(out.splitlines()) <= 1
    out.encode("utf-8")  # never a lone surrogate


@given(st.binary(max_size=50))
@settings(max_examples=200)
def test_argv_bytes_are_either_utf8_or_refused(raw: bytes) -> None:
    text = raw.decode("utf-8", "surrogateescape")
    try:
        check_text(text, "--x")
    except ValidationError as exc:
        assert str(exc).startswith("--x: ")
        str(exc).encode("utf-8")
    else:
        assert text.encode("utf-8") == raw


def test_ids() -> None:
    assert check_id("T-1", "ID") == "T-1"
    for bad, why in [("", "empty"), ("a b", "whitespace"), ("x" * 201, "longer than 200"),
                     ("a\x1b", "control"), ("\udcff", "not valid UTF-8")]:
        with pytest.raises(ValidationError, match=why):
            check_id(bad, "ID")


def test_ints() -> None:
    assert check_int(5, "--n", 1, 10) == 5
    with pytest.raises(ValidationError, match=r"^--n: must be between 1 and 10, got 11$"):
        check_int(11, "--n", 1, 10)


@pytest.mark.parametrize(("text", "want", "why"), [
    ('{"a": 1, "a": 2}', None, "duplicate key 'a'"),
    ('{"x": {"a": 1, "a": 2}}', None, "duplicate key 'a'"),
    ("[1, 2]", dict, "must be a JSON object, got an array"),
    ("NaN", None, "NaN is not JSON"),
    ('{"a": Infinity}', None, "Infinity is not JSON"),
    ('{"a": 1e400}', None, "number 1e400 is out of range"),
    ("9" * 5000, None, "a number of 5000 digits"),
    ("[" * 100 + "]" * 100, None, "nested deeper than 64"),
    ("{nope", None, "not valid JSON"),
    ("x" * (2 << 20), None, "longer than"),
])
def test_strict_json(text: str, want: type | None, why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        parse_json(text, "--j", want=want)


def test_strict_json_keeps_good_values() -> None:
    assert parse_json('{"a": [1, {"b": null}]}', "--j", want=dict) == {"a": [1, {"b": None}]}


def test_read_file_stops_at_the_cap(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"^/dev/zero: larger than 100 bytes$"):
        read_file("/dev/zero", 100)
    p = tmp_path / "ok"
    p.write_bytes(b"x" * 100)
    assert read_file(p, 100) == b"x" * 100
    for path, why in [(tmp_path / "missing", "no such file"), (tmp_path, "is a directory")]:
        with pytest.raises(ValidationError, match=f"^{path}: {why}$"):
            read_file(path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValidationError, match="not a regular file"):
        read_file(fifo)
    (tmp_path / "latin").write_bytes(b"caf\xe9")
    with pytest.raises(ValidationError, match="latin: not UTF-8 text"):
        read_text(tmp_path / "latin")


# ---------------------------------------------------------------- workflow files


def _flow(tmp_path: Path, text: str, name: str = "w.lobster") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(("retry", "why"), [
    (f"{{max: {MAX_RETRY_ATTEMPTS + 1}}}", "retry.max must be at most 100"),
    ("{max: 1000000000}", "retry.max must be at most 100"),
    ("{max: 2, delay_ms: 1e12}", "retry.delay_ms must be at most 3600000"),
    ("{max: 2, max_delay_ms: 99999999999}", "retry.max_delay_ms must be at most 3600000"),
])
def test_retry_is_capped(tmp_path: Path, retry: str, why: str) -> None:
    p = _flow(tmp_path, f"steps:\n  - id: a\n    run: 'false'\n    retry: {retry}\n")
    with pytest.raises(WorkflowError, match=why):
        load_workflow(p)
    ok = _flow(tmp_path, f"steps:\n  - id: a\n    run: x\n    retry: {{max: {MAX_RETRY_ATTEMPTS}}}"
               "\n", "ok.lobster")
    load_workflow(ok)


def test_for_each_pause_is_capped(tmp_path: Path) -> None:
    p = _flow(tmp_path, "steps:\n  - id: l\n    run: echo '[1]'\n  - id: e\n    for_each: $l.json\n"
              "    pause_ms: 1e15\n    steps:\n      - id: s\n        run: echo\n")
    with pytest.raises(WorkflowError, match="pause_ms must be at most 3600000"):
        load_workflow(p)


def test_cycles_are_found_at_load(tmp_path: Path) -> None:
    _flow(tmp_path, "steps:\n  - id: to_b\n    workflow: b.lobster\n", "a.lobster")
    _flow(tmp_path, "steps:\n  - id: to_c\n    workflow: sub/c.lobster\n", "b.lobster")
    (tmp_path / "sub").mkdir()
    _flow(tmp_path / "sub", "steps:\n  - id: back\n    workflow: ../a.lobster\n", "c.lobster")
    with pytest.raises(WorkflowError, match=r"creates a cycle: .*a\.lobster"):
        load_workflow(tmp_path / "a.lobster")
    self_loop = _flow(tmp_path, "steps:\n  - id: me\n    workflow: self.lobster\n",
                      "self.lobster")
    with pytest.raises(WorkflowError, match="Workflow step me creates a cycle"):
        load_workflow(self_loop)


def test_templated_sub_workflow_paths_are_left_to_the_run(tmp_path: Path) -> None:
    p = _flow(tmp_path, "steps:\n  - id: t\n    workflow: ${which}.lobster\n")
    assert load_workflow(p)["steps"][0]["id"] == "t"


def test_nesting_is_capped(tmp_path: Path) -> None:
    for i in range(MAX_SUBWORKFLOW_DEPTH + 1):
        _flow(tmp_path, f"steps:\n  - id: s{i}\n    workflow: w{i + 1}.lobster\n", f"w{i}.lobster")
    _flow(tmp_path, "steps:\n  - id: leaf\n    run: echo\n",
          f"w{MAX_SUBWORKFLOW_DEPTH + 1}.lobster")
    with pytest.raises(WorkflowError, match="nested deeper than 16"):
        load_workflow(tmp_path / "w0.lobster")


def test_a_broken_sub_workflow_is_named_at_load(tmp_path: Path) -> None:
    _flow(tmp_path, "steps:\n  - id: c\n    workflow: child.lobster\n", "p.lobster")
    _flow(tmp_path, "steps:\n  - id: x\n    retry: {max: 0}\n    run: echo\n", "child.lobster")
    with pytest.raises(WorkflowError, match=r"Workflow step c sub-workflow .*child\.lobster:"
                                            r" Workflow step x retry.max"):
        load_workflow(tmp_path / "p.lobster")


@pytest.mark.parametrize(("steps", "ok"), [
    ("  - id: a\n    run: echo\n  - id: b\n    stdin: $a.stdout\n    run: cat\n", True),
    ("  - id: b\n    stdin: $a.stdout\n    run: cat\n  - id: a\n    run: echo\n", False),
    ("  - id: b\n    stdin: $nope.json\n    input: {prompt: p, responseSchema: {}}\n", False),
    ("  - id: b\n    stdin: 'text $nope.json is a template'\n    run: cat\n", True),
    ("  - id: e\n    for_each: $nope.json\n    steps:\n      - id: s\n        run: echo\n", False),
    ("  - id: l\n    run: echo\n  - id: e\n    for_each: $l.json\n    steps:\n"
     "      - id: s\n        run: echo\n      - id: t\n        stdin: $s.stdout\n"
     "        run: cat\n      - id: u\n        stdin: $item.json\n        run: cat\n", True),
    ("  - id: l\n    run: echo\n  - id: e\n    for_each: $l.json\n    steps:\n"
     "      - id: t\n        stdin: $s.stdout\n        run: cat\n"
     "      - id: s\n        run: echo\n", False),
])
def test_strict_references_are_checked_before_the_run(tmp_path: Path, steps: str,
                                                      ok: bool) -> None:
    workflow = load_workflow(_flow(tmp_path, "steps:\n" + steps))
    if ok:
        check_workflow_conditions(workflow)
    else:
        with pytest.raises(WorkflowError, match=r"^Unknown step reference: "):
            check_workflow_conditions(workflow)


@pytest.mark.parametrize("text", ['{"k": "\\ud800"}', '{"\\udc00": 1}', '["\\udfff"]'])
def test_json_escapes_of_lone_surrogates_are_refused(text: str) -> None:
    """Found by the fuzzer: `"\\ud800"` parsed, then failed when the store serialised it."""
    with pytest.raises(ValidationError, match=r"^--j: a string holds a lone surrogate \(\\u"):
        parse_json(text, "--j")


def test_yaml_escapes_of_lone_surrogates_are_refused(tmp_path: Path) -> None:
    from clawtower.core.safe_yaml import load_file

    p = tmp_path / "s.yaml"
    p.write_text('goal: "\\ud800"\n')
    with pytest.raises(ValidationError, match=r"s\.yaml: a string holds a lone surrogate"):
        load_file(p)
