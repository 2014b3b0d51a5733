"""Provider-safe tool names (OpenAI and Anthropic refuse dots in tool names)."""

from __future__ import annotations

from clawtower.core.tools.names import WIRE_OK, unwire, wire_names


def test_wire_names_are_safe_unique_and_reversible() -> None:
    names = ["time.get_current_time", "clock.now", "everything.get-sum", "plain_name",
             "git.git_status", "a.b.c", "a__b.c", "x." + "y" * 100, "x." + "y" * 101,
             "weird.tool/with space"]
    m = wire_names(names)
    assert m["time.get_current_time"] == "time__get_current_time"
    assert m["clock.now"] == "clock__now" and m["plain_name"] == "plain_name"
    assert m["everything.get-sum"] == "everything__get-sum"
    assert m["weird.tool/with space"] == "weird__tool_with_space"
    assert all(WIRE_OK.match(w) for w in m.values())
    assert len(set(m.values())) == len(names)
    assert unwire(m) == {w: r for r, w in m.items()} and len(unwire(m)) == len(names)
    assert wire_names(reversed(names)) == m  # stable for the same set


def test_a_collision_gets_a_hash_suffix() -> None:
    m = wire_names(["a.b", "a__b"])  # "a__b" is already safe and keeps itself
    assert m["a__b"] == "a__b" and m["a.b"] != "a__b" and m["a.b"].startswith("a__b_")
