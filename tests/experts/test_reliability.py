"""Issue 22, items 1-3 for experts: a refused credentials or bindings change writes nothing;
no writer shares a fixed temp file; a run executes a content-addressed compiled file that
parallel runs never rewrite; steps without outside effects are marked safe to re-run."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from clawtower.cli.main import main
from clawtower.core import files
from clawtower.core.errors import ValidationError
from clawtower.core.experts import home
from clawtower.core.experts.bindings import bindings_path, load_bindings, write_binding
from clawtower.core.triggers import hookauth
from clawtower.core.workflows.adoption import repeatable
from clawtower.core.workflows.load import load_workflow
from tests.helpers.hook_expert import install_hook_expert

from .conftest import ACME


@pytest.fixture
def expert_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("CLAWTOWER_HOME", str(h))
    return h


def test_refused_triggers_auth_leaves_hooks_yaml_byte_for_byte(
        expert_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    install_hook_expert(tmp_path)
    hookauth.write("hook-expert", "inbound", token="a-good-token-0123456789")
    path = hookauth.hooks_file("hook-expert")
    before = path.read_bytes()
    assert os.stat(path).st_mode & 0o777 == 0o600
    for bad in (["--token", "short"], ["--max-bytes", "-1"], ["--secret", "tiny"]):
        code = main(["triggers", "auth", "hook-expert", "inbound", *bad])
        err = capsys.readouterr().err
        assert code == 2 and "hooks.yaml:inbound." in err, err
        assert path.read_bytes() == before  # refused: nothing written
        assert hookauth.load("hook-expert")["inbound"].token == "a-good-token-0123456789"
    # a valid change after the refusals works, and no temp file is left behind
    assert main(["triggers", "auth", "hook-expert", "inbound", "--max-bytes", "4096"]) == 0
    assert hookauth.load("hook-expert")["inbound"].max_bytes == 4096
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_refused_binding_leaves_bindings_yaml_byte_for_byte(expert_home: Path) -> None:
    write_binding("x", "crm", {"type": "mcp", "command": "srv"})
    before = bindings_path("x").read_bytes()
    with pytest.raises(ValidationError, match=r"bindings\.yaml:tools\.crm\.type"):
        write_binding("x", "crm", {"type": "nope"})
    assert bindings_path("x").read_bytes() == before
    assert list(load_bindings(bindings_path("x"))) == ["crm"]


def test_a_check_that_refuses_writes_nothing_and_parallel_writers_never_collide(
        tmp_path: Path) -> None:
    p = tmp_path / "cfg.yaml"
    files.write_text(p, "a: 1\n")

    def refuse(_: str) -> None:
        raise ValidationError("cfg.yaml:a: no")

    with pytest.raises(ValidationError):
        files.write_text(p, "a: 2\n", check=refuse)
    assert p.read_text() == "a: 1\n"
    # 8 threads x 50 writes of one file: each write is whole (a fixed `cfg.tmp` shared by
    # writers failed here with FileNotFoundError or a torn file)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(50):
                files.write_text(p, f"writer: {n}\ni: {i}\n" * 50)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    lines = p.read_text().splitlines()
    assert len(lines) == 100 and len(set(lines[::2])) == 1
    assert sorted(x.name for x in tmp_path.iterdir()) == ["cfg.yaml"]


def test_a_new_only_write_never_replaces_a_file(tmp_path: Path) -> None:
    """`new=True` (clawtower init): a file already there, even one that appeared after any
    check, stays byte for byte, FileExistsError says so, and no temp file is left."""
    p = tmp_path / "sub" / "clawtower.yaml"
    files.write_bytes(p, b"first\n", new=True)
    assert p.read_bytes() == b"first\n" and p.stat().st_mode & 0o777 == 0o644
    with pytest.raises(FileExistsError):
        files.write_bytes(p, b"second\n", new=True)
    assert p.read_bytes() == b"first\n"
    assert sorted(x.name for x in p.parent.iterdir()) == ["clawtower.yaml"]


def test_no_writer_uses_a_fixed_temp_name() -> None:
    root = Path(__file__).resolve().parents[2] / "clawtower"  # the import root
    offenders = []
    for sub in ("core", "cli"):
        assert (root / sub / "__init__.py").is_file(), root / sub
        for f in (root / sub).rglob("*.py"):
            text = f.read_text(encoding="utf-8")
            if 'with_suffix(".tmp")' in text or 'name + ".tmp"' in text or \
                    '.md.tmp"' in text:
                offenders.append(str(f.relative_to(root)))
    # the replica's snapshot slot is held under an exclusive flock: one writer by design
    assert offenders == ["core/store/replica.py"], offenders


def _install_acme(tmp_path: Path) -> Any:
    pkg = home.install(str(ACME))
    for tool in ("helpdesk", "kb"):
        write_binding(pkg.name, tool, {"type": "mcp", "command": "srv"})
    return home.load_package(home.package_dir(pkg.name))


def test_a_run_executes_a_content_addressed_file_written_once(
        expert_home: Path, tmp_path: Path) -> None:
    pkg = _install_acme(tmp_path)
    first = home.compiled_for_run(pkg, "ticket-triage")
    stamp = first.stat().st_mtime_ns
    again = home.compiled_for_run(pkg, "ticket-triage")
    assert again == first and first.stat().st_mtime_ns == stamp  # not rewritten
    assert first.parent.parent == home.compiled_dir(pkg.name) / "versions"
    # a changed binding is a new version in a new file; the old one stays for its runs
    write_binding(pkg.name, "kb", {"type": "mcp", "command": "srv", "operations": {
        "search_articles": {"inputs": {"query": "subject"}}}})
    changed = home.compiled_for_run(pkg, "ticket-triage")
    assert changed != first and first.is_file()
    load_workflow(changed)


def test_steps_without_outside_effects_are_marked_safe_to_rerun(
        expert_home: Path, tmp_path: Path) -> None:
    pkg = _install_acme(tmp_path)
    for proc in pkg.processes:
        wf = load_workflow(home.compiled_for_run(pkg, proc))
        for step in wf["steps"]:
            calls_a_tool = str(step.get("command", "")).endswith(" call")
            assert repeatable(step) is not calls_a_tool, (proc, step["id"])
        ids = [s["id"] for s in wf["steps"] if repeatable(s)]
        assert "finish" in ids


def test_a_runs_session_state_is_its_own_notes_whatever_runs_in_parallel(
        expert_home: Path) -> None:
    from clawtower.core.experts import state

    pkg = home.install(str(ACME))
    shift, queue = "state/shift-notes.md", "state/queue.md"
    assert pkg.state[shift].meta.get("scope") == "session"

    def note(seq: int, run: str, text: str, rel: str = shift) -> dict[str, Any]:
        return {"seq": seq, "type": "expert.state_noted", "file": rel, "note": text,
                "at": "t", "run_id": run, "step_id": "s", "step_seq": seq}

    def reset(seq: int, run: str) -> dict[str, Any]:
        return {"seq": seq, "type": "expert.state_reset", "files": [shift], "at_seq": seq,
                "run_id": run}

    # A starts, notes; B starts (its reset must not cut A's notes into B's session, nor
    # mix them), A notes again, B notes: the file is B's session, persistent files keep all
    events = [reset(1, "W-A"), note(2, "W-A", "a1"), note(3, "W-A", "q-a", queue),
              reset(4, "W-B"), note(5, "W-A", "a2"), note(6, "W-B", "b1")]
    texts = state.render(pkg, events)
    assert texts[shift][1] == 1 and "b1" in texts[shift][0]
    assert "a1" not in texts[shift][0] and "a2" not in texts[shift][0]
    assert texts[queue][1] == 1 and "q-a" in texts[queue][0]
    # the same events without run ids (a chat's reset): the notes after the reset, as before
    old = [{**e, "run_id": ""} if e["type"] == "expert.state_reset" else e for e in events]
    assert state.render(pkg, old)[shift][1] == 2  # a2 and b1
