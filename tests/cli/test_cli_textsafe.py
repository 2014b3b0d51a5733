"""Hostile text never reaches the terminal raw: typed into free-text inputs, returned by a
simulated model, carried in a webhook payload or a meeting topic, it is stored exactly as
received, shown as visible escapes in every text output (stdout, stderr, Markdown minutes)
and stays lossless in --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_helpers import Run

from clawtower.core.textsafe import drop_unsafe, is_safe, safe, safe_line
from tests.helpers.hook_expert import install_hook_expert

ESC = "\x1b"
# ESC/CSI/OSC sequences, BEL, backspace, CR, C1 (CSI as one char), bidi overrides and
# isolates, zero-width joiners and spaces, a tag character, a line separator
CORPUS = [
    f"a{ESC}[31mred{ESC}[0m\a",
    f"{ESC}]0;owned title\a{ESC}]8;;http://evil/\a link {ESC}]8;;\a",
    f"{ESC}[2J{ESC}[H{ESC}[1A{ESC}[K cleared",
    "back\b\b\bspace\rover",
    "c1 \x9b31m \x90dcs\x9c \x85nel",
    "bidi \u202eevil\u202c \u2066iso\u2069 \u2067r\u2069 \u200f\u061c",
    "zw \u200dj\u200b\u200c\ufeff\u2060 tag\U000e0041",
    "line\u2028sep\u2029para",
]
RAW = [ESC, "\a", "\b", "\r", "\x9b", "\x90", "\x9c", "\x85", "\u202e", "\u202c", "\u2066",
       "\u2067", "\u2069", "\u200f", "\u061c", "\u200d", "\u200b", "\u200c", "\ufeff",
       "\u2060", "\U000e0041", "\u2028", "\u2029"]
HOSTILE = " | ".join(CORPUS)


def assert_shown(text: str) -> None:
    bad = sorted({repr(ch) for ch in text if ch in RAW})
    assert not bad, f"raw control/bidi characters reached the output: {bad}"


def test_the_check_the_escape_and_the_drop_agree_on_every_code_point() -> None:
    # three tables and a character class built apart (the class as ranges, for start-up)
    unsafe = [chr(o) for o in range(0x110000) if not is_safe(chr(o))]
    assert len(unsafe) == 2272
    for c in unsafe:
        assert safe(c) != c and drop_unsafe(c) == ""
        assert safe_line(c) == safe(c)  # they differ only on a newline, which is safe
    text = "".join(chr(o) for o in range(0x110000))
    assert len(drop_unsafe(text)) == 0x110000 - len(unsafe)
    assert is_safe(drop_unsafe(text)) and is_safe(safe(text)) and is_safe(safe_line(text))
    assert safe("a\nb\tc") == "a\nb\tc" and safe_line("a\nb") == "a\\nb"


def test_the_sanitiser_shows_what_it_would_have_obeyed() -> None:
    out = safe(HOSTILE + "\ttab\nnext")
    assert_shown(out)
    assert "\ttab\nnext" in out  # tab and newline stay
    assert "\\x1b[31mred" in out and "<U+202E>evil" in out and "<U+200D>" in out
    assert "\\x9b31m" in out and "\\x07" in out and "\\x08" in out and "\\r" in out
    assert safe(out) == out  # shown text stays as shown
    assert safe_line("a\nb") == "a\\nb"
    assert safe("plain café → ✓ 日本") == "plain café → ✓ 日本"


@pytest.fixture
def meeting_agents(tmp_path: Path) -> Path:
    path = tmp_path / "agents.yaml"
    reply = f"I agree. {HOSTILE}\nSTANCE: AGREE"
    path.write_text(yaml.safe_dump({
        "seed": 1, "speed": 0,
        "agents": {n: {"role": "executor", "model": "sim-standard"} for n in ("ada", "bob")},
        "scripts": {n: {"meeting": [{"text": reply}], "ask": [{"text": reply}]}
                    for n in ("ada", "bob")}},
        width=10**6), encoding="utf-8")
    return path


def test_hostile_text_on_every_cli_path(run: Run, db: Path, tmp_path: Path,
                                        meeting_agents: Path, home: Path) -> None:
    outputs: list[str] = []

    def text(*argv: str | Path, code: int = 0) -> str:
        r = run(*argv, "--db", db)
        assert r.code == code, (argv, r.err)
        outputs.extend([r.out, r.err])
        return r.out

    # a session: the title and a message the operator typed; the simulated model's reply
    sid = text("session", "new", "--title", HOSTILE).strip()
    sent = text("session", "send", sid, HOSTILE)
    assert "\\x1b[31m" in sent or "\\x1b[31m" in text("session", "show", sid)
    shown = text("session", "show", sid)
    assert "<U+202E>evil" in shown
    text("session", "list")
    # stored exactly as received, and --json is lossless
    js = run("session", "show", sid, "--json", "--db", db)
    assert js.code == 0 and HOSTILE in strings(js.json())
    assert_shown(js.out)  # JSON escapes them itself
    # a simulated model answering a question that quotes the text
    asked = text("llm", "ask", HOSTILE, "--agent", "ada", "--config", meeting_agents)
    assert "<U+202E>evil" in asked
    # a webhook payload (the trigger's intake, fired by hand): its dedupe key in the log
    install_hook_expert(tmp_path)
    payload = json.dumps({"event_id": HOSTILE, "contact_id": HOSTILE})
    text("triggers", "fire", "hook-expert", "inbound", "--payload", payload)
    text("triggers", "fire", "hook-expert", "inbound", "--payload", payload)
    assert "\\x1b[31m" in text("events")  # repr() in the summary, shown either way
    text("triggers", "history")
    text("triggers", "list")
    # a meeting: the topic, and replies holding the corpus, on stdout and in the minutes
    minutes = home / "minutes"
    out = text("meeting", "run", "--topic", HOSTILE, "--agents", "ada,bob", "--max-rounds",
               "1", "--minutes-dir", minutes, "--config", meeting_agents)
    mid = json.loads(run("meeting", "list", "--json", "--db", db).out)[0]["id"]
    text("meeting", "show", mid)
    text("meeting", "list")
    md = (minutes / f"{mid}.md").read_text(encoding="utf-8")
    assert "<U+202E>evil" in md and "\\x1b[31m" in md
    assert_shown(md)
    # a task: title, goal and criteria from a spec file, a reason typed on the command line
    spec = tmp_path / "hostile.yaml"
    spec.write_text(yaml.safe_dump({
        "title": HOSTILE, "goal": HOSTILE, "scope_in": ["x"], "scope_out": ["y"],
        "inputs": ["i"], "outputs": ["o"], "acceptance_criteria": [HOSTILE],
        "risks": [HOSTILE]}, width=10**6), encoding="utf-8")
    tid = text("task", "create", spec).strip()
    text("task", "transition", tid, "spec_review", "--as", "orchestrator", "--reason", HOSTILE)
    listed = text("task", "list")
    detail = text("task", "show", tid)
    assert "\\x1b[31m" in listed and "<U+202E>evil" in detail
    text("events", "--entity", tid)
    # errors echo user input through the same stream
    text("session", "show", f"S-{ESC}[31m", code=2)
    for o in outputs:
        assert_shown(o)
    assert "<U+202E>evil" in out  # the meeting's own stdout (topic, replies) escaped
    topic = json.loads(run("meeting", "show", mid, "--json", "--db", db).out)["topic"]
    assert topic == HOSTILE  # the store kept it verbatim


def strings(value: object) -> list[str]:
    """Every string in a decoded JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []
