"""`clawtower memory` (issue 25 item 4): put/search/show/list/forget/export/import through
the real entry point; --json on reads; bad input is one line with exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import Run


def test_memory_commands_round_trip(run: Run, tmp_path: Path) -> None:
    db = str(tmp_path / "db.sqlite")
    r = run("memory", "put", "agent:a", "pet", "The cat is called Miso", "--category",
            "fact", "--db", db)
    assert (r.code, r.out.strip()) == (0, "agent:a pet: stored")
    assert run("memory", "put", "agent:a", "pet", "The cat is called Miso", "--category",
               "fact", "--db", db).out.strip() == "agent:a pet: unchanged"
    run("memory", "put", "agent:a", "lunch", "Lunch is at noon", "--db", db)
    r = run("memory", "search", "agent:a", 'what is the cat "NEAR( called', "-k", "1",
            "--json", "--db", db)
    assert r.code == 0 and [m["key"] for m in r.json()["memories"]] == ["pet"]
    assert r.json()["mode"] == "bm25" and "no embedding provider" in r.json()["reason"]
    r = run("memory", "search", "agent:a", "cat", "--db", db)
    assert r.out.splitlines()[0].startswith("mode: bm25 (no embedding provider configured")
    r = run("memory", "show", "agent:a", "pet", "--json", "--db", db)
    assert r.json()["content"] == "The cat is called Miso" and r.json()["reason"] == "cli"
    r = run("memory", "list", "agent:a", "--json", "--db", db)
    assert [m["key"] for m in r.json()] == ["lunch", "pet"]

    r = run("memory", "export", "agent:a", "--format", "md", "--db", db)
    assert r.code == 0 and "# Memories: agent:a" in r.out and "## pet" in r.out
    r = run("memory", "export", "agent:a", "--db", db)
    lines = [json.loads(line) for line in r.out.splitlines()]
    assert [x["key"] for x in lines] == ["lunch", "pet"]
    dump = tmp_path / "a.jsonl"
    dump.write_text(r.out)

    other = str(tmp_path / "other.sqlite")
    r = run("memory", "import", str(dump), "--json", "--db", other)
    assert r.code == 0 and r.json()["stored"] == 2
    r = run("memory", "import", str(dump), "--json", "--db", other)
    assert (r.json()["stored"], r.json()["unchanged"]) == (0, 2)  # idempotent by key

    r = run("memory", "forget", "agent:a", "pet", "--reason", "wrong cat", "--db", db)
    assert r.code == 0
    assert [m["key"] for m in run("memory", "list", "agent:a", "--json", "--db", db).json()] \
        == ["lunch"]
    r = run("memory", "search", "agent:a", "cat", "--json", "--db", db)
    assert r.json()["memories"] == []


def test_memory_bad_input_is_one_line_exit_2(run: Run, tmp_path: Path) -> None:
    db = str(tmp_path / "db.sqlite")
    run("memory", "put", "agent:a", "k", "fine", "--db", db)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"namespace": "agent:a", "key": "new", "content": "x"})
                   + "\nnot json\n")
    cases = [
        (("memory", "import", str(bad)), "bad.jsonl: line 2:"),
        (("memory", "put", "robot:x", "k", "t"), "memory namespace 'robot:x'"),
        (("memory", "put", "agent:a", "big", "x" * 9000), "over the limit"),
        (("memory", "forget", "agent:a", "nope", "--reason", "r"), "no such memory"),
        (("memory", "search", "agent:a", "x", "-k", "0"), "-k 0"),
        (("memory", "show", "agent:a", "nope"), "memory 'agent:a/nope': no such memory"),
        (("memory", "put", "agent:a", "t", "x", "--expires", "10 minutes"),
         "--expires '10 minutes': not a duration (30s, 10m, 2h, 7d) or an ISO 8601 time"),
        (("memory", "put", "agent:a", "t", "x", "--expires", "0s"), "--expires '0s'"),
        (("memory", "put", "agent:a", "t", "x", "--expires", "2001-01-01"), "already past"),
    ]
    for argv, needle in cases:
        r = run(*argv, "--db", db)
        assert r.code == 2, (argv, r.err)
        assert needle in r.err and len(r.err.strip().splitlines()) == 1, r.err
        assert "Traceback" not in r.err
    keys = [m["key"] for m in run("memory", "list", "--json", "--db", db).json()]
    assert keys == ["k"]  # the corrupt import wrote nothing, not even its good line 1
    r = run("memory", "list", "--db", str(tmp_path / "missing.db"))
    assert r.code == 0 and not (tmp_path / "missing.db").exists()


def test_memory_expires(run: Run, tmp_path: Path) -> None:
    """`--expires` takes a duration or an ISO time; an expired memory is listed as expired
    and not recalled."""
    import asyncio

    from clawtower.core.memory.service import Memories
    from clawtower.core.store import open_store

    db = str(tmp_path / "db.sqlite")
    r = run("memory", "put", "agent:a", "soon", "The door code is 4321", "--expires", "2h",
            "--db", db)
    assert r.code == 0, r.err
    r = run("memory", "put", "agent:a", "later", "The door colour is red", "--expires",
            "2999-01-01T00:00:00Z", "--db", db)
    shown = {m["key"]: m for m in run("memory", "list", "--json", "--db", db).json()}
    assert shown["later"]["expires_at"] == 32472144000.0
    assert 7100 < shown["soon"]["expires_at"] - shown["soon"]["created_at"] <= 7200

    async def expire() -> None:  # a memory whose time has come (no sleeping in a test)
        store = await open_store(db)
        try:
            await Memories(store).put("agent:a", "soon", "The door code is 4321", by="t",
                                      expires_at=store.clock.now() - 1)
        finally:
            await store.close()

    asyncio.run(expire())
    r = run("memory", "list", "agent:a", "--db", db)
    assert "agent:a soon (expired): The door code is 4321" in r.out
    assert "later: The door colour" in r.out and "later (expired)" not in r.out
    r = run("memory", "search", "agent:a", "door", "--json", "--db", db)
    assert [m["key"] for m in r.json()["memories"]] == ["later"]
    assert "(expired)" in run("memory", "show", "agent:a", "soon", "--db", db).out


def test_memory_with_an_embedding_provider_that_is_down(run: Run, tmp_path: Path) -> None:
    """A configured provider nobody answers on: put stores without a vector and says why,
    search falls back to BM25 and says why, `memory embed` is one line (exit 1)."""
    import socket

    with socket.socket() as s:  # a port with no server
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = tmp_path / "clawtower.yaml"
    cfg.write_text(
        f"providers:\n  local: {{kind: openai, base_url: 'http://127.0.0.1:{port}/v1',"
        " models: [emb], retries: 0}\nmemory:\n  embeddings: {provider: local, model: emb}\n")
    db = str(tmp_path / "db.sqlite")
    r = run("memory", "put", "agent:a", "k", "deploys happen on tuesday", "--db", db,
            "--config", str(cfg))
    assert r.code == 0 and r.out.startswith("agent:a k: stored (not embedded: provider"
                                            " local: embeddings (emb): cannot reach"), r.out
    r = run("memory", "search", "agent:a", "tuesday", "--json", "--db", db, "--config",
            str(cfg))
    assert r.json()["mode"] == "bm25" and "cannot reach" in r.json()["reason"]
    assert [m["key"] for m in r.json()["memories"]] == ["k"]
    r = run("memory", "embed", "--db", db, "--config", str(cfg))
    assert r.code == 1 and "cannot reach" in r.err and len(r.err.strip().splitlines()) == 1
    assert "Traceback" not in r.err
    r = run("memory", "embed", "--db", db)  # no provider configured at all
    assert r.code == 2 and "no embedding provider configured" in r.err
