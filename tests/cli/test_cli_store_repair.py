"""Issue 34 through the real entry point: an import of NaN or ±Infinity is one line and exit
2 with nothing written (the store's own refusal, under any import check); a store that an
older release filled with such values reads without crashing and `store repair` makes
`store verify` clean again with one recorded event."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import OPERATOR, Run
from old_release import old_release

LINE = '{"namespace":"shared:t","key":"%s","content":"x","expires_at":%s}\n'


def strict(line: str) -> object:
    def refuse(name: str) -> object:
        raise AssertionError(f"not JSON: {name} in {line!r}")

    return json.loads(line, parse_constant=refuse)


def events(db: Path) -> list[tuple[int, str, str]]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT seq, type, actor FROM events ORDER BY seq").fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_import_is_one_line_and_exit_2_with_nothing_written(
        run: Run, tmp_path: Path, value: str) -> None:
    db = tmp_path / "db.sqlite"
    assert run("memory", "put", "shared:t", "first", "kept", "--db", db).code == 0
    f = tmp_path / "hostile.jsonl"
    f.write_text(LINE % ("fine", 2e9) + LINE % ("bad", value))
    r = run("memory", "import", f, "--db", db)
    assert (r.code, r.out) == (2, "")
    # the import's own check (core/reader.py) names the line first
    assert r.err.strip() == (f"clawtower: error: {f}: line 2: {value} is not a number a file"
                             " may hold (only finite numbers); nothing imported")
    assert r.err.count("\n") == 1
    # under it, the store's check refuses whatever an import check lets through
    with old_release(encode=False):
        r = run("memory", "import", f, "--db", db)
    assert (r.code, r.out) == (2, "")
    assert r.err.strip() == (f"clawtower: error: memory.stored: field expires_at: {value} is"
                             " not a storable number (events hold finite numbers and 64-bit"
                             " integers)")
    assert [t for _, t, _ in events(db)] == ["memory.stored"]
    r = run("store", "verify", "--db", db)
    assert (r.code, r.out.splitlines()[0]) == (0, "projections match the log")


def test_store_repair_heals_what_an_older_release_imported(run: Run, tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    f = tmp_path / "old.jsonl"
    f.write_text("".join(LINE % (k, v) for k, v in [
        ("ok", 2e9), ("nan", "NaN"), ("inf", "Infinity"), ("ninf", "-Infinity"),
        ("big", "1e308")]))
    with old_release():  # the release before the check, as it wrote
        assert run("memory", "import", f, "--db", db).code == 0
    r = run("store", "verify", "--db", db)
    assert r.code == 1 and "2 only live, 2 only replayed" in r.out
    # reads work before the repair: no OverflowError, no Infinity in JSON
    r = run("memory", "show", "shared:t", "big", "--db", db)
    assert r.code == 0 and "  expires: 1e+308 (no calendar date)" in r.out.splitlines()
    r = run("memory", "show", "shared:t", "inf", "--json", "--db", db)
    assert r.code == 0 and strict(r.out)["expires_at"] is None  # type: ignore[index]
    r = run("memory", "export", "shared:t", "--db", db)
    assert r.code == 0 and len([strict(x) for x in r.out.splitlines()]) == 5

    r = run("store", "repair", "--db", db)
    assert r.code == 0, r.err
    assert r.out.splitlines() == [
        "verify before the repair: memories: 5 live rows vs 5 replayed; 2 only live,"
        " 2 only replayed",
        "event 3 memory.stored shared:t/inf: expires_at Infinity -> null",
        "event 4 memory.stored shared:t/ninf: expires_at -Infinity -> null",
        "event 5 memory.stored shared:t/big: expires_at 1e+308 -> null",
        "recorded store.repaired (event 6): 3 value(s) replaced; the events that carried"
        " them stay in the log",
        "projections match the log"]
    assert events(db)[-1] == (6, "store.repaired", OPERATOR)
    r = run("store", "verify", "--db", db)
    assert (r.code, r.out.splitlines()[0]) == (0, "projections match the log")
    r = run("memory", "show", "shared:t", "big", "--db", db)
    assert r.code == 0 and "expires" not in r.out
    r = run("memory", "export", "shared:t", "--db", db)
    assert [strict(x)["expires_at"] for x in r.out.splitlines()] == [  # type: ignore[index]
        None, None, None, None, 2e9]
    r = run("store", "repair", "--db", db)
    assert (r.code, r.out.strip()) == (0, "nothing to repair: projections match the log and"
                                          " hold no unusable value")
    assert len(events(db)) == 6
    r = run("store", "rebuild", "--db", db)
    assert r.code == 0 and run("store", "verify", "--db", db).code == 0
