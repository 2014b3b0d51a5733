"""Requirement 10: the bounded YAML/JSON loader refuses what would hurt, naming the file
(and the line where it is known)."""

from __future__ import annotations

import time

import pytest

from clawtower.core import safe_yaml
from clawtower.core.errors import ValidationError
from clawtower.core.safe_yaml import MAX_BYTES, MAX_DEPTH, MAX_NODES, load_file, loads
from clawtower.core.tasks.spec import load_spec

ALIAS_BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""

MERGE_BOMB = """\
base: &base {x: 1}
one: {<<: *base, y: 2}
"""


def refused(tmp_path, name: str, content: bytes | str, *fragments: str,
            seconds: float = 5.0) -> str:
    # `seconds` is a denial-of-service bound, not a speed target: an unbounded alias or
    # merge-key bomb takes minutes; the bound is loose so a busy CI machine cannot trip it
    p = tmp_path / name
    if isinstance(content, str):
        p.write_text(content, encoding="utf-8")
    else:
        p.write_bytes(content)
    t0 = time.monotonic()
    with pytest.raises(ValidationError) as err:
        load_file(p)
    assert time.monotonic() - t0 < seconds, "refusing took too long"
    msg = str(err.value)
    assert str(p) in msg, msg
    for f in fragments:
        assert f in msg, msg
    return msg


def test_alias_bomb(tmp_path):
    refused(tmp_path, "bomb.yaml", ALIAS_BOMB, "line 1:", "anchors are not allowed")


def test_alias_without_anchor_and_merge_keys(tmp_path):
    refused(tmp_path, "alias.yaml", "a: 1\nb: *nowhere\n", "line 2")
    refused(tmp_path, "merge.yaml", MERGE_BOMB, "line 1", "anchors")


def test_anchor_alone_is_refused(tmp_path):
    refused(tmp_path, "anchor.yaml", "goal: ok\nlist: &x [1, 2]\n", "line 2",
            "anchors are not allowed")


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 500, 50_000])
def test_deep_nesting_yaml(tmp_path, depth):
    refused(tmp_path, f"deep{depth}.yaml", "[" * depth + "]" * depth,
            f"nested deeper than {MAX_DEPTH} levels")


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 50_000])
def test_deep_nesting_json(tmp_path, depth):
    refused(tmp_path, f"deep{depth}.json", "[" * depth + "]" * depth)


def test_nesting_within_the_limit_loads(tmp_path):
    p = tmp_path / "ok.yaml"
    p.write_text("[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1))
    assert isinstance(load_file(p), list)
    q = tmp_path / "ok.json"
    q.write_text('{"a": [1, 2, {"b": null}]}')
    assert load_file(q) == {"a": [1, 2, {"b": None}]}


def test_huge_file(tmp_path):
    refused(tmp_path, "huge.yaml", b"a: " + b"x" * MAX_BYTES + b"\n",
            f"larger than {MAX_BYTES} bytes")
    with pytest.raises(ValidationError, match="larger than"):
        loads("x" * (MAX_BYTES + 1), "inline")


def test_too_many_nodes(tmp_path):
    items = ",".join(["1"] * (MAX_NODES + 10))
    # counted in libyaml's event stream before the pure-Python composer builds a node:
    # 0.26 s at load 9 on 2 cores (the composer took 17-22 s there, issue 39)
    msg = refused(tmp_path, "many.yaml", f"[{items}]", f"more than {MAX_NODES} nodes",
                  seconds=10.0)
    assert "line 1" in msg


def test_too_many_nodes_are_refused_before_any_is_composed(monkeypatch):
    def compose_node(*_: object) -> None:
        raise AssertionError("the composer ran")

    monkeypatch.setattr(safe_yaml._BoundedLoader, "compose_node", compose_node)
    with pytest.raises(ValidationError, match=f"inline: line 2: more than {MAX_NODES} nodes"):
        loads("\n[" + ",".join(["1"] * (MAX_NODES + 1)) + "]", "inline")


def test_deep_nesting_is_refused_before_any_node_is_composed(monkeypatch):
    # 50,000 open brackets used to recurse in the composer until Python's limit: 6.2 s
    # beside a second suite (issue 39); libyaml's events show the depth first
    def compose_node(*_: object) -> None:
        raise AssertionError("the composer ran")

    monkeypatch.setattr(safe_yaml._BoundedLoader, "compose_node", compose_node)
    for depth in (MAX_DEPTH + 1, 50_000):
        with pytest.raises(ValidationError,
                           match=f"inline: line 2: nested deeper than {MAX_DEPTH} levels"):
            loads("\n" + "[" * depth + "]" * depth, "inline")
        block = "".join("  " * i + "b:\n" for i in range(min(depth, 900)))
        with pytest.raises(ValidationError, match=r"block: line \d+: nested deeper than"):
            loads(block, "block")


def test_without_libyaml_the_composer_still_stops_at_the_limit(monkeypatch):
    monkeypatch.delattr(safe_yaml.yaml, "CBaseLoader")
    monkeypatch.setattr(safe_yaml, "MAX_NODES", 50)
    with pytest.raises(ValidationError, match="inline: line 1: more than 50 nodes"):
        loads("[" + ",".join(["1"] * 60) + "]", "inline")
    assert loads("[" + ",".join(["1"] * 40) + "]", "inline") == [1] * 40


def test_bad_utf8(tmp_path):
    refused(tmp_path, "latin1.yaml", "goal: caf\xe9\n".encode("latin-1"), "not UTF-8",
            "byte 9")


def test_nul(tmp_path):
    refused(tmp_path, "nul.yaml", b"goal: a\x00b\n", "NUL")
    refused(tmp_path, "nul.json", b'{"goal": "a\x00b"}', "line 1")


def test_syntax_errors_name_the_line(tmp_path):
    refused(tmp_path, "broken.yaml", "goal: ok\nlist: [1, 2\nother: 3\n", "line",
            "invalid YAML")
    refused(tmp_path, "broken.json", '{\n"a": 1,\n}', "line 3", "invalid JSON")


def test_missing_and_directory(tmp_path):
    with pytest.raises(ValidationError, match="no such file"):
        load_file(tmp_path / "nope.yaml")
    with pytest.raises(ValidationError, match="is a directory"):
        load_file(tmp_path)


def test_python_tags_are_not_constructed(tmp_path):
    refused(tmp_path, "tag.yaml", "x: !!python/object/apply:os.system ['echo hi']\n", "line 1")


def test_spec_errors_name_file_and_field(tmp_path):
    p = tmp_path / "spec.yaml"
    p.write_text("goal: g\noutputs: [a]\nacceptance_criteria: [x y z w]\nowner: me\n")
    with pytest.raises(ValidationError, match=r"spec\.yaml: field 'owner': unknown field"):
        load_spec(p)
    p.write_text("- just\n- a list\n")
    with pytest.raises(ValidationError, match="a spec must be a mapping"):
        load_spec(p)
    p.write_text("goal: ''\n")
    with pytest.raises(ValidationError, match="field 'goal'"):
        load_spec(p)
