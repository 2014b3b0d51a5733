"""Hostile input, fuzzed: every command's arguments through the real `main()`.

For each command a template argv with holes; hypothesis fills the holes with hostile values
(bytes that are not UTF-8, as Python hands them over: lone surrogates; huge and negative
integers; JSON with duplicate keys, arrays where objects are meant, NaN, deep nesting;
control characters; paths to /dev/zero, directories, missing files; ids of things that exist
and things that do not). Every run must:

- exit 0, 1 or 2, and never print a traceback or hit the catch-all ("internal error");
- on exit 1 or 2, say why in exactly one stderr line that names a field it was given (the
  option, the argument's name, or the value itself) - or, for `workflow run|resume`, which
  answer with Lobster's envelope, an error envelope on stdout;
- on a refusal, leave the store as it was: no new event but the `permission.refused` that
  records a refused write.

The number of examples per command is CLAWTOWER_FUZZ_EXAMPLES (default 20: the normal suite
stays fast); the README's "Hostile input" figures come from a run with a larger number.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import sqlite3
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from cli_helpers import OPERATOR, spec
from hypothesis import HealthCheck, given, settings

from clawtower.core.limits import printable

EXAMPLES = int(os.environ.get("CLAWTOWER_FUZZ_EXAMPLES", "20"))
COUNTS: Counter[str] = Counter()

FAST_AGENTS = ("seed: 3\nspeed: 0\nagents:\n  ada: {role: participant}\n"
               "  ben: {role: participant}\n")
GATE = "steps:\n  - id: ship\n    approval: Ship it?\n"


@dataclass(frozen=True)
class Hole:
    """A place in an argv that the fuzzer fills; `field` is what an error must name."""

    field: str
    kind: str = "text"  # text | id | int | float | json | path


def H(field: str, kind: str = "text") -> Hole:  # a placeholder in a template
    return Hole(field, kind)


# every command, with its arguments as holes (the engine-running ones bounded: serve
# --until-idle, demo --headless; the console and `events --follow` wait for a human)
COMMANDS: dict[str, list[Any]] = {
    "task create": ["task", "create", H("SPEC.yaml", "path")],
    "task update-spec": ["task", "update-spec", H("id", "id"), H("SPEC.yaml", "path")],
    "task list": ["task", "list", "--phase", H("--phase")],
    "task show": ["task", "show", H("id", "id")],
    "task transition": ["task", "transition", H("id", "id"), H("phase"), "--as", H("--as"),
                        "--reason", H("--reason"), "--by", H("--by")],
    "task review": ["task", "review", H("id", "id"), "--as", H("--as"), "--verdict",
                    H("--verdict"), "--finding", H("--finding"), "--test-gap",
                    H("--test-gap")],
    "task unblock": ["task", "unblock", H("id", "id"), H("CHOICE"), "--reason", H("--reason")],
    "task retry": ["task", "retry", H("id", "id"), "--reason", H("--reason"), "--by",
                   H("--by")],
    "task cancel": ["task", "cancel", H("id", "id"), "--reason", H("--reason")],
    "approvals": ["approvals", "--all", "--json"],
    "approve": ["approve", H("id", "id"), "--by", H("--by"), "--reason", H("--reason")],
    "reject": ["reject", H("id", "id"), "--reason", H("--reason"), "--by", H("--by")],
    "events": ["events", "--after", H("--after", "int"), "--entity", H("--entity", "id")],
    "trace": ["trace", H("id", "id"), "--width", H("--width", "int")],
    "store info": ["store", "info"],
    "meeting run": ["meeting", "run", "--topic", H("--topic"), "--agents", H("--agents"),
                    "--max-rounds", H("--max-rounds", "int"), "--summary-tokens",
                    H("--summary-tokens", "int"), "--minutes-dir", H("--minutes-dir", "path"),
                    "--agents-file", "AGENTS"],
    "meeting show": ["meeting", "show", H("id", "id")],
    "meeting stop": ["meeting", "stop", H("id", "id"), "--reason", H("--reason")],
    "meeting grant": ["meeting", "grant", H("id", "id"), H("N", "int")],
    "workflow run": ["workflow", "run", "--file", H("--file", "path"), "--args-json",
                     H("--args-json", "json")],
    "workflow resume": ["workflow", "resume", "--id", H("--id", "id"), "--approve",
                        H("--approve"), "--by", H("--by")],
    "workflow resume json": ["workflow", "resume", "--id", "GATE", "--response-json",
                             H("--response-json", "json")],
    "workflow resume token": ["workflow", "resume", "--token", H("--token", "id"),
                              "--approve", "yes"],
    "workflow show": ["workflow", "show", H("id", "id")],
    "workflow recover": ["workflow", "recover", H("id", "id"), "--skip"],
    "workflow cancel": ["workflow", "cancel", H("id", "id"), "--reason", H("--reason")],
    "workflow graph": ["workflow", "graph", "--file", "FLOW", "--format", H("--format"),
                       "--args-json", H("--args-json", "json")],
    "agents show": ["agents", "show", H("NAME", "id")],
    "llm ask": ["llm", "ask", "--agent", H("--agent", "id"), H("TEXT"), "--max-tokens",
                H("--max-tokens", "int"), "--temperature", H("--temperature", "float")],
    "llm task": ["llm", "task", "--agent", "ada", "--schema", H("--schema", "path"),
                 "--input", H("--input", "path"), "--timeout", H("--timeout", "float")],
    "tools call": ["tools", "call", H("NAME", "id"), "--args", H("--args", "json")],
    "tools pin": ["tools", "pin", H("NAME", "id")],
    "serve": ["serve", "--until-idle", "--agents", H("--agents", "path")],
    "triggers fire": ["triggers", "fire", H("expert", "id"), H("trigger", "id"), "--payload",
                      H("--payload", "json")],
    "triggers history": ["triggers", "history", H("EXPERT", "id"), "--limit",
                         H("--limit", "int")],
    "deadletter retry": ["deadletter", "retry", H("id", "id")],
    "deadletter drop": ["deadletter", "drop", H("id", "id"), "--reason", H("--reason")],
    "demo": ["demo", "--headless", "--speed", H("--speed", "badspeed")],
    # sessions and agent specs (a session never waits here: no worker runs in this test)
    "session new": ["session", "new", "--agent", H("--agent", "id"), "--title",
                    H("--title"), "--channel", H("--channel")],
    "session send": ["session", "send", H("ID", "id"), H("TEXT"), "--no-wait"],
    "session steer": ["session", "steer", H("ID", "id"), H("TEXT"), "--no-wait"],
    "session spawn": ["session", "spawn", H("ID", "id"), H("TASK"), "--agent",
                      H("--agent", "id"), "--label", H("--label"), "--no-wait"],
    "session stop": ["session", "stop", H("ID", "id"), "--reason", H("--reason")],
    "session show": ["session", "show", H("ID", "id"), "--json"],
    "session tree": ["session", "tree", H("ID", "id"), "--json"],
    "agents spec show": ["agents", "spec", "show", H("REF", "id"), "--json"],
    "agents spec set": ["agents", "spec", "set", H("NAME", "id"), "--file",
                        H("--file", "path"), "--temperature", H("--temperature", "float"),
                        "--tools", H("--tools")],
    # expert packages (installed under CLAWTOWER_HOME, which the fixture points at a tmp dir)
    "expert install": ["expert", "install", H("PATH|GIT_URL", "path")],
    "expert validate": ["expert", "validate", H("PATH|NAME", "path"), "--json"],
    "expert show": ["expert", "show", H("name", "id"), "--json"],
    "expert run": ["expert", "run", H("name", "id"), H("process", "id"), "--input",
                   H("--input")],
    "expert bind": ["expert", "bind", H("name", "id"), H("tool", "id"), "--op",
                    H("--op")],
    "expert learn": ["expert", "learn", H("name", "id"), "--title", H("--title"),
                     "--observation", H("--observation"), "--correction",
                     H("--correction"), "--confidence", H("--confidence")],
    # flows, ACP harnesses, meeting adoption
    "flow run": ["flow", "run", H("AGENT", "id"), H("TASK"), "--context",
                 H("--context", "json"), "--max-depth", H("--max-depth", "int"),
                 "--max-width", H("--max-width", "int")],
    "flow show": ["flow", "show", H("ID", "id"), "--markdown"],
    "flow cancel": ["flow", "cancel", H("ID", "id"), "--reason", H("--reason")],
    "flow mailbox": ["flow", "mailbox", H("AGENT", "id"), "--flow", H("--flow", "id"),
                     "--limit", H("--limit", "int")],
    "flow export": ["flow", "export", H("ID", "id"), H("DIR", "target")],
    "acp run": ["acp", "run", H("agent", "id"), H("prompt"), "--cwd", H("--cwd", "path")],
    "acp show": ["acp", "show", H("run", "id")],
    "acp cancel": ["acp", "cancel", H("run", "id")],
    "acp answer": ["acp", "answer", H("approval", "id"), H("option", "id")],
    "acp revoke": ["acp", "revoke", H("rule", "id"), "--reason", H("--reason")],
    "meeting resume": ["meeting", "resume", H("ID", "id"), "--agents-file", "AGENTS"],
    # store administration: copying from hostile sources into a fresh target
    "store copy": ["store", "copy", "--from", H("--from", "path"), "--to",
                   H("--to", "target")],
}

# --------------------------------------------------------------------------- values


def _not_utf8(b: bytes) -> str:
    """What Python makes of argv bytes that are not UTF-8."""
    return b.decode("utf-8", "surrogateescape")


HUGE = ["99999999999999999999999999", "-99999999999999999999", str(2**63), str(-(2**63) - 1),
        "1" * 5000, "-1", "0", "1e999", "nan", "inf", "-0", "0x10"]
ODD_JSON = ['{"a": 1, "a": 2}', "[1, 2]", "NaN", "1e999", '"text"', "null", "{}",
            "{" * 200 + "}" * 200, "[" * 100 + "]" * 100, '{"k": "\\ud800"}', "{nope",
            '{"version": "1.0"}', '{"who": "ops"}']
ODD_TEXT = ["", " ", "\x00", "a\nb", "\x1b[31mred", "\u2028", "x" * 30_000, "T-1", "W-1",
            "GATE", "nosuch", "../../etc/passwd", "-", "--db", "ada", "ada,ben"]
ODD_PATHS = ["/dev/zero", "/dev/null", "/", "/etc", "/nonexistent/x.yaml", ".", "spec.yaml",
             "dup.json", "list.json", "big.yaml", "ok-spec.yaml", "flow.lobster",
             "/proc/self/mem", "minutes", "../outside"]

not_utf8 = st.binary(min_size=1, max_size=20).map(_not_utf8)
text = st.one_of(st.text(max_size=40), not_utf8, st.sampled_from(ODD_TEXT))


def value_for(kind: str) -> st.SearchStrategy[str]:
    if kind == "int":
        return st.one_of(st.integers(-(2**70), 2**70).map(str), st.sampled_from(HUGE), text)
    if kind == "float":
        return st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                         st.sampled_from(HUGE), text)
    if kind == "json":
        return st.one_of(st.sampled_from(ODD_JSON), text,
                         st.recursive(st.none() | st.integers() | st.text(max_size=5),
                                      lambda c: st.lists(c, max_size=3)
                                      | st.dictionaries(st.text(max_size=3), c, max_size=3),
                                      max_leaves=8).map(json.dumps))
    if kind == "badspeed":  # a valid speed runs the whole demo (tests/cli/test_cli_demo.py)
        return value_for("float").filter(lambda v: not _valid_speed(v))
    if kind == "path":
        return st.one_of(st.sampled_from(ODD_PATHS), text)
    if kind == "target":  # never a device or a system directory: the copy writes there
        return st.one_of(st.sampled_from(["copy.db", "minutes", "store.db", "", "new/x.db",
                                          "postgresql://nobody@127.0.0.1:1/none"]),
                         st.text(alphabet="abc.-_", min_size=1, max_size=12))
    if kind == "id":
        return st.one_of(st.sampled_from(["T-1", "W-1", "GATE", "M-1", "ada", "clock.now",
                                          "x" * 500, "T-1\n", "T-\x001"]), text)
    return text


def _valid_speed(v: str) -> bool:
    try:
        return 0 <= float(v) <= 1000
    except ValueError:
        return False


# --------------------------------------------------------------------------- the store


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A store with a task, a paused workflow gate and files to point at; a cwd of its own."""
    from clawtower.cli.main import main

    root = tmp_path_factory.mktemp("fuzz")
    home = root / "home"
    saved = {k: os.environ.get(k) for k in ("CLAWTOWER_HOME", "CLAWTOWER_OPERATOR",
                                            "CLAWTOWER_DEMO_DIR", "CLAWTOWER_DEBUG")}
    os.environ.update(CLAWTOWER_HOME=str(home), CLAWTOWER_OPERATOR=OPERATOR)
    os.environ.pop("CLAWTOWER_DEMO_DIR", None)
    os.environ.pop("CLAWTOWER_DEBUG", None)
    cwd = os.getcwd()
    os.chdir(root)
    db = root / "store.db"
    (root / "agents.yaml").write_text(FAST_AGENTS)
    (root / "flow.lobster").write_text(GATE)
    (root / "ok-spec.yaml").write_text(Path(spec("01")).read_text())
    (root / "spec.yaml").write_text("goal: x\ngoal: y\n")  # a duplicate key
    (root / "dup.json").write_text('{"type": "object", "type": "array"}')
    (root / "list.json").write_text("[1, 2]")
    (root / "big.yaml").write_text("a: " + "x" * (2 << 20) + "\n")
    (root / "minutes").mkdir()
    with _quiet():
        assert main(["task", "create", str(root / "ok-spec.yaml"), "--db", str(db)]) == 0
    gate = asyncio.run(_paused_gate(db, root / "flow.lobster"))
    try:
        yield {"db": db, "gate": gate, "root": root, "agents": str(root / "agents.yaml"),
               "flow": str(root / "flow.lobster")}
    finally:
        os.chdir(cwd)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if COUNTS:  # hypothesis stops early when a template has few distinct inputs
            runs = sum(v for k, v in COUNTS.items() if k.startswith("exit"))
            print(f"\nfuzz: {runs} runs; " + ", ".join(f"{k} {v}"
                                                     for k, v in sorted(COUNTS.items())))


async def _paused_gate(db: Path, flow: Path) -> str:
    from clawtower.core.store import open_store
    from clawtower.core.workflows.service import Workflows

    store = await open_store(db)
    try:
        env = await Workflows(store, env={}, cwd=str(flow.parent)).run(str(flow))
        return str(env["requiresApproval"]["approvalId"])
    finally:
        await store.close()


@contextlib.contextmanager
def _quiet() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    out, err = io.StringIO(), io.StringIO()
    stdin, sys.stdin = sys.stdin, io.StringIO("")  # "-" reads stdin: an empty one here
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out, err
    finally:
        sys.stdin = stdin


def _events(db: Path) -> list[str]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [r[0] for r in con.execute("SELECT type FROM events ORDER BY seq")]
    finally:
        con.close()


def _names(hole: Hole, value: str) -> list[str]:
    """What an error about this hole may name: the field, or the value (as printed)."""
    names = [hole.field, hole.field.upper(), hole.field.lstrip("-")]
    shown = printable(value, 60)
    if not value.strip() and len(value) < 10:  # an empty or blank value, quoted: agent ''
        names.append(repr(value))
    if shown.strip():
        names += [shown[:30], repr(value)[1:31], value.strip()[:30]]
        if hole.kind == "path" and "\x00" not in value:  # as pathlib prints it: "0/" -> "0"
            names.append(printable(str(Path(value)), 30))
    return [n for n in names if n]


# --------------------------------------------------------------------------- the test


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_hostile_arguments(world: dict[str, Any], name: str) -> None:
    from clawtower.cli.main import main

    template = COMMANDS[name]
    holes = [h for h in template if isinstance(h, Hole)]
    fixed = {"AGENTS": world["agents"], "GATE": world["gate"], "FLOW": world["flow"]}

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=False,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.tuples(*(value_for(h.kind) for h in holes)))
    def check(values: tuple[str, ...]) -> None:
        filled = iter(values)
        argv = [next(filled) if isinstance(t, Hole) else fixed.get(t, t) for t in template]
        argv = [world["gate"] if a == "GATE" else a for a in argv]
        argv += ["--db", str(world["db"])]
        before = _events(world["db"])
        with _quiet() as (out, err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's own usage errors
                code = exc.code if isinstance(exc.code, int) else 1
        stdout, stderr = out.getvalue(), err.getvalue()
        COUNTS[f"exit {code}"] += 1
        COUNTS[f"command {name}"] += 1
        assert code in (0, 1, 2), (argv, code, stderr)
        assert "Traceback" not in stderr and "internal error" not in stderr, (argv, stderr)
        if code == 0:
            return
        after = _events(world["db"])
        added = [t for t in after[len(before):] if t != "permission.refused"]
        assert after[:len(before)] == before and not added, (argv, added)
        lines = [ln for ln in stderr.splitlines() if not ln.startswith(
            ("clawtower: no store at", "clawtower: warning:"))]
        if not lines and name.startswith("workflow r"):  # Lobster's envelope, on stdout
            envelope = json.loads(stdout)
            assert envelope["ok"] is False, stdout
            return
        assert len(lines) == 1, (argv, stderr)
        named = [n for h, v in zip(holes, values, strict=True) for n in _names(h, v)]
        named += [t for t in template if isinstance(t, str) and t.startswith("--")]
        assert any(n in lines[0] for n in named) or _names_a_fixed_part(lines[0], world), (
            argv, lines[0])

    check()


def _names_a_fixed_part(line: str, world: dict[str, Any]) -> bool:
    """An error about the part of the argv the fuzzer did not touch (the gate, the flow,
    the agents file) names that part."""
    return bool(re.search(re.escape(world["gate"]) + "|flow.lobster|agents.yaml|ship", line))
