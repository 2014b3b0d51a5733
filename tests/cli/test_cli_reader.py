"""Issue 34 parts 3 (import side) and 4: every hostile import the issue found, through the
real CLI: one stderr line naming the file (and line, and field), exit 2, nothing written and
`store verify` clean (core/reader.py, core/memory/transfer.py, core/sessions/openclaw.py)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from pathlib import Path

import pytest
from cli_helpers import CLAWTOWER, Run, child_env, max_seq

MEMORY = {"namespace": "agent:a", "key": "new", "content": "a fact"}


@pytest.fixture
def store(run: Run, db: Path) -> Path:
    r = run("memory", "put", "agent:a", "old", "kept", "--db", db)
    assert r.code == 0, r.err
    return db


def _refused(run: Run, db: Path, argv: tuple[str | Path, ...], *needles: str) -> str:
    before = max_seq(db)
    t0 = time.monotonic()
    r = run(*argv, "--db", db)
    assert time.monotonic() - t0 < 20, argv
    lines = r.err.splitlines()
    assert r.code == 2, r.err
    assert len(lines) == 1 and "Traceback" not in r.err and "internal error" not in r.err, r.err
    assert "set_int_max_str_digits" not in r.err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert max_seq(db) == before  # nothing written
    v = run("store", "verify", "--db", db)
    assert (v.code, v.out) == (0, "projections match the log\n"), v.out
    return lines[0]


# ------------------------------------------------------------------------- memory import

BAD_LINES = [
    ('{"namespace": "agent:a", "key": "k", "content": "x", "expires_at": NaN}',
     "line 2: NaN is not a number"),
    ('{"namespace": "agent:a", "key": "k", "content": "x", "expires_at": Infinity}',
     "line 2: Infinity is not a number"),
    ('{"namespace": "agent:a", "key": "k", "content": "x", "expires_at": -Infinity}',
     "line 2: -Infinity is not a number"),
    ('{"namespace": "agent:a", "key": "k", "content": "x", "expires_at": 1e308}',
     "line 2: expires_at 1e+308: after 9999-12-31"),
    ('{"namespace": "agent:a", "key": "k", "content": "x", "expires_at": 1e400}',
     "line 2: number 1e400 is out of range"),
    ('{"namespace": "agent:a", "key": "k", "content": "x", "expires_at": true}',
     "line 2: expires_at true: not a time"),
    ('{"namespace": "agent:a", "key": "k", "content": "x", "expires_at": 1.0}',
     "line 2: expires_at 1.0: already past"),
    ('{"namespace": "agent:a", "key": "k", "content": "x", "expires_at": "2001-01-01"}',
     "line 2: expires_at '2001-01-01': already past"),
    ('{"namespace": "agent:a", "key": "k", "content": "x", "expires_at": "soon"}',
     "line 2: expires_at 'soon': not a duration"),
    ('{"namespace": "agent:a", "key": "k", "content": "x", "expires_at": [1]}',
     "line 2: expires_at [1]: not a time"),
    ('{"namespace": "agent:a", "key": "k", "content": "x", "expires": 4102444800}',
     "line 2: unknown field 'expires' (did you mean 'expires_at'?)"),
    ('{"namespace": "agent:a", "key": "k", "content": "x", "key": "k2"}',
     "line 2: duplicate key 'key'"),
    ('{"namespace": "agent:a", "key": "k", "content": ' + "[" * 5000 + "]" * 5000 + "}",
     "line 2: nested deeper than 64 levels"),
    ('{"namespace": "agent:a", "key": "k", "content": "x", "expires_at": ' + "9" * 5000 + "}",
     "line 2: a number of 5000 digits (at most 100)"),
]


@pytest.mark.parametrize(("line", "why"), BAD_LINES, ids=lambda x: str(x)[-30:])
def test_a_hostile_memory_import_is_one_line_and_imports_nothing(
        run: Run, store: Path, tmp_path: Path, line: str, why: str) -> None:
    f = tmp_path / "memories.jsonl"
    f.write_text(json.dumps(MEMORY) + "\n" + line + "\n")  # a good line 1: not imported
    _refused(run, store, ("memory", "import", f), f"{f}: {why}", "nothing imported")
    keys = [m["key"] for m in run("memory", "list", "--json", "--db", store).json()]
    assert keys == ["old"]


def test_a_good_import_keeps_its_expiry_and_show_works(run: Run, store: Path,
                                                       tmp_path: Path) -> None:
    f = tmp_path / "memories.jsonl"
    f.write_text(json.dumps({**MEMORY, "expires_at": 4102444800}) + "\n"
                 + json.dumps({**MEMORY, "key": "iso", "expires_at": "2099-01-01T00:00:00Z"})
                 + "\n")
    r = run("memory", "import", f, "--db", store)
    assert r.code == 0, r.err
    r = run("memory", "show", "agent:a", "new", "--db", store)
    assert r.code == 0 and "expires: 2100-01-01T00:00:00Z" in r.out, r.out
    r = run("memory", "show", "agent:a", "iso", "--db", store)
    assert r.code == 0 and "expires: 2099-01-01T00:00:00Z" in r.out, r.out


def test_memory_import_of_dev_zero_and_a_fifo(run: Run, store: Path, tmp_path: Path) -> None:
    _refused(run, store, ("memory", "import", "/dev/zero"), "/dev/zero: larger than")
    fifo = tmp_path / "m.jsonl"
    os.mkfifo(fifo)
    _refused(run, store, ("memory", "import", fifo), f"{fifo}: not a regular file")


def test_an_export_over_a_mebibyte_imports_again(run: Run, store: Path, tmp_path: Path) -> None:
    """The import's byte limit is an export's size (MAX_IMPORT_BYTES), not a config file's
    1 MiB: 300 memories of 6,000 characters (1.8 MB) go out and in again."""
    lines = "".join(json.dumps({**MEMORY, "key": f"k{i}", "content": f"{i} " + "x" * 6000})
                    + "\n" for i in range(300))
    f = tmp_path / "big.jsonl"
    f.write_text(lines)
    assert f.stat().st_size > 1 << 20
    r = run("memory", "import", f, "--db", store)
    assert (r.code, r.out.strip()) == (0, f"{f}: 300 stored, 0 updated, 0 unchanged"), r.err
    out = tmp_path / "again.jsonl"
    r = run("memory", "export", "agent:a", "--format", "jsonl", "--db", store)
    assert r.code == 0, r.err
    out.write_text(r.out)
    assert out.stat().st_size > 1 << 20
    r = run("memory", "import", out, "--db", store)
    assert (r.code, r.out.strip()) == (0, f"{out}: 0 stored, 0 updated, 301 unchanged"), r.err


# ------------------------------------------------------------- agents spec import --openclaw


def _capped(store: Path, home: Path, path: Path | str) -> str:
    """The import in a real process, its address space capped at 1 GiB and its time at 60 s:
    reading /dev/zero to the end (what the unbounded read did: 4 GB in 10 s) fails with
    MemoryError, a FIFO with no writer blocks (TimeoutExpired)."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    before = max_seq(store)
    t0 = time.monotonic()
    p = subprocess.run([str(CLAWTOWER), "agents", "spec", "import", "--openclaw", str(path),
                        "--db", str(store)], env=child_env(home), capture_output=True,
                       text=True, timeout=60, preexec_fn=cap)
    assert time.monotonic() - t0 < 30
    assert p.returncode == 2, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert max_seq(store) == before
    return lines[0]


def _source(tmp_path: Path, kind: str) -> tuple[str, str]:
    """(path, why) of a hostile OpenClaw config that is not a small regular file."""
    if kind == "dev-zero":
        return "/dev/zero", "/dev/zero: larger than 262144 bytes"
    p = tmp_path / f"{kind}.json"
    if kind == "fifo":
        os.mkfifo(p)
        return str(p), f"{p}: not a regular file (a pipe or socket)"
    with p.open("wb") as f:
        f.truncate(60 << 20)  # 60 MB: refused after the first 256 KiB, never parsed
    return str(p), f"{p}: larger than 262144 bytes"


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "60-mb"])
def test_openclaw_from_dev_zero_a_fifo_or_60_mb_is_bounded(store: Path, home: Path,
                                                           tmp_path: Path, kind: str) -> None:
    path, why = _source(tmp_path, kind)
    assert _capped(store, home, path) == f"clawtower: error: {why}"


OPENCLAW_CONTENT = [
    ("deep", "{agents: " + "[" * 50_000 + "]" * 50_000 + "}",
     "line 1: nested deeper than 64 levels"),
    ("digits", "{agents: {entries: {a: {n: " + "9" * 5000 + "}}}}",
     "line 1: a number of 5000 digits (at most 100)"),
    ("dup", "{agents: {entries: {a: {}}},\n agents: {entries: {b: {}}}}",
     "line 2: duplicate key 'agents'"),
    ("nan", "// c\n{agents: {entries: {a: {n: NaN}}}}", "line 2: NaN is not a number"),
    ("inf", "{agents: {entries: {a: {n: -Infinity}}}}", "line 1: -Infinity is not a number"),
]


@pytest.mark.parametrize(("name", "text", "why"), OPENCLAW_CONTENT, ids=lambda x: str(x)[:8])
def test_openclaw_hostile_content(run: Run, store: Path, tmp_path: Path, name: str,
                                  text: str, why: str) -> None:
    f = tmp_path / f"{name}.json"
    f.write_text(text)
    _refused(run, store, ("agents", "spec", "import", "--openclaw", f), f"{f}: {why}")


# ------------------------------------------- unknown fields of a schema: a did-you-mean


@pytest.mark.parametrize(("argv", "text", "why"), [
    (("task", "create"), "goal: g\nacceptence_criteria: [a]\n",
     "field 'acceptence_criteria': unknown field (did you mean 'acceptance_criteria'?)"),
    (("task", "create"), "goal: g\nside_effects: [{kind: k, description: d, traget: t}]\n",
     "field 'side_effects.0.traget': unknown field (did you mean 'target'?)"),
    (("agents", "spec", "set", "ada", "--file"), "defaults: {modle: x}\n",
     "field 'defaults.modle': unknown field (did you mean 'model'?)"),
])
def test_a_misspelt_field_gets_a_did_you_mean(run: Run, store: Path, tmp_path: Path,
                                              argv: tuple[str, ...], text: str,
                                              why: str) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(text)
    _refused(run, store, (*argv, f), str(f), why)


def test_show_survives_an_expiry_stored_before_imports_were_checked(run: Run,
                                                                   store: Path) -> None:
    import asyncio

    from clawtower.core.memory.service import Memories
    from clawtower.core.store import open_store

    async def put() -> None:  # what main's import wrote for `"expires_at": 1e308`
        s = await open_store(str(store))
        try:
            await Memories(s).put("agent:a", "far", "x", by="t", expires_at=1e308)
        finally:
            await s.close()

    asyncio.run(put())
    r = run("memory", "show", "agent:a", "far", "--db", store)
    assert r.code == 0 and "expires: 1e+308" in r.out, r.err
