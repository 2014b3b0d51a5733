"""`clawtower init [DIR]`: writes the starting project of clawtower/project/, whose files load
and run (the commands it prints are run as printed, with the installed script), and never
writes over anything: a refusal is exit 2, one line naming the file, and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_helpers import CLAWTOWER, OPERATOR, Run

from clawtower.core.assets import asset

PROJECT = asset("project")
FILES = sorted(p.relative_to(PROJECT).as_posix() for p in PROJECT.rglob("*") if p.is_file())


def tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` and its bytes (what a refusal must leave as it was)."""
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def one_line(err: str, *needles: str) -> None:
    assert len(err.splitlines()) == 1 and err.startswith("clawtower: error: "), err
    for n in needles:
        assert n in err, (n, err)


def test_init_writes_every_file_of_the_project(run: Run, tmp_path: Path) -> None:
    target = tmp_path / "new" / "proj"  # a folder that does not exist yet, nor its parent
    r = run("init", target)
    assert r.code == 0, r.err
    assert r.err == ""
    assert tree(target) == {rel: (PROJECT / rel).read_bytes() for rel in FILES}
    assert {"clawtower.yaml", "flows.yaml", "workflows/publish.lobster", "README.md",
            "packages/standup-notes/expert.yaml"} <= set(FILES)
    assert not any(part.startswith("experts") for rel in FILES for part in rel.split("/"))
    lines = r.out.splitlines()
    assert lines[0] == f"clawtower init: wrote {len(FILES)} files in {target}"
    assert lines[1] == "  clawtower.yaml"
    assert sorted(x.strip() for x in lines[1:1 + len(FILES)]) == FILES
    assert f"  cd {target} && export CLAWTOWER_HOME=\"$PWD\"" in lines


def test_init_into_an_existing_folder_of_other_files(run: Run, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "other.lobster").write_text("name: other\n")
    monkeypatch.chdir(tmp_path)
    r = run("init")  # DIR defaults to the current folder
    assert r.code == 0, r.err
    assert (tmp_path / "notes.txt").read_text() == "mine\n"
    assert (tmp_path / "workflows" / "other.lobster").read_text() == "name: other\n"
    assert all((tmp_path / rel).is_file() for rel in FILES)
    assert "  export CLAWTOWER_HOME=\"$PWD\"" in r.out.splitlines()  # no `cd .`


def test_the_config_loads_and_its_commented_providers_too(run: Run, tmp_path: Path) -> None:
    from clawtower.core.agents.config import config_from_data, load_config
    from clawtower.core.safe_yaml import loads

    assert run("init", tmp_path / "p").code == 0
    path = tmp_path / "p" / "clawtower.yaml"
    cfg = load_config(path)
    assert sorted(cfg.agents) == ["lead", "researcher"]
    assert {a.provider for a in cfg.agents.values()} == {"simulator"}
    assert all(a.system for a in cfg.agents.values())
    assert cfg.providers == {}
    # the commented-out providers are valid as they stand once uncommented
    text = path.read_text()
    start = text.index("# providers:")
    block = text[start:text.index("\n\n", start)]
    providers = "\n".join(line.replace("# ", "", 1) for line in block.splitlines())
    data = loads(text.replace(block, providers), str(path))
    cfg = config_from_data(data, path)
    assert cfg.providers["local"].kind == "openai"
    assert cfg.providers["local"].base_url == "http://127.0.0.1:8000/v1"
    assert cfg.providers["claude"].kind == "anthropic"
    assert cfg.providers["claude"].api_key_env == "ANTHROPIC_API_KEY"


def test_the_expert_package_validates_installs_and_runs(run: Run, tmp_path: Path,
                                                        home: Path) -> None:
    assert run("init", tmp_path / "p").code == 0
    pkg = tmp_path / "p" / "packages" / "standup-notes"
    r = run("expert", "validate", pkg)
    assert (r.code, r.out, r.err) == (0, "standup-notes: valid\n", ""), r.out + r.err
    r = run("expert", "install", pkg)
    assert r.code == 0, r.err
    assert (home / "experts" / "standup-notes" / "expert.yaml").is_file()
    r = run("expert", "run", "standup-notes", "daily-standup", "--input", "notes=fixed login",
            "--db", tmp_path / "x.db")
    assert r.code == 0, r.out + r.err
    assert r.json()["status"] == "ok"


def _shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A printed command line, run by a shell as a user pastes it, with the installed script
    first on PATH and no CLAWTOWER_HOME of the test's (the printed line exports it)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CLAWTOWER_") or k == "CLAWTOWER_OPERATOR"}
    env["PATH"] = f"{CLAWTOWER.parent}{os.pathsep}{env.get('PATH', '')}"
    env["CLAWTOWER_OPERATOR"] = OPERATOR
    env["HOME"] = str(cwd)  # were the export missing, the store would not be a real one's
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_printed_commands_run_as_printed(tmp_path: Path) -> None:
    """init, then each command it prints, by the installed script, in a fresh folder."""
    r = _shell("clawtower init proj", tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("next "))
    setup, flow, workflow, expert, console = (x.strip() for x in lines[at + 1:])
    assert setup == 'cd proj && export CLAWTOWER_HOME="$PWD"'
    assert console.startswith("clawtower   #")
    project = tmp_path / "proj"

    r = _shell(f"{setup} && {flow}", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "lead: ag-" in r.stdout and "researcher: ag-" in r.stdout
    assert "F-1 · done · 4/4 tasks done" in r.stdout + r.stderr
    assert (project / "clawtower.db").is_file()  # the project is the home
    r = _shell(f"{setup} && clawtower flow show F-1 --json", tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["flow"]["status"] == "done"

    r = _shell(f"{setup} && {workflow}", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    envelope = json.loads(r.stdout)
    assert envelope["status"] == "needs_approval"
    approval = envelope["requiresApproval"]["approvalId"]
    r = _shell(f"{setup} && clawtower approve {approval}", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _shell(f"{setup} && clawtower workflow show W-1 --json", tmp_path)
    shown = json.loads(r.stdout)
    assert shown["status"] == "ok", shown
    assert "published Hello" in json.dumps(shown)

    r = _shell(f"{setup} && {expert}", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (project / "experts" / "standup-notes" / "expert.yaml").is_file()
    out = r.stdout[r.stdout.index("{"):]
    assert json.loads(out)["status"] == "ok"


def test_init_twice_refuses_naming_the_file_and_changes_nothing(run: Run,
                                                                tmp_path: Path) -> None:
    target = tmp_path / "p"
    assert run("init", target).code == 0
    (target / "flows.yaml").write_text("mine\n")
    before = tree(target)
    r = run("init", target)
    assert (r.code, r.out) == (2, "")
    one_line(r.err, f"{target / 'clawtower.yaml'}: already exists", "clawtower init")
    assert tree(target) == before


def test_one_conflicting_file_means_nothing_is_written(run: Run, tmp_path: Path) -> None:
    target = tmp_path / "p"
    (target / "workflows").mkdir(parents=True)
    (target / "workflows" / "publish.lobster").write_text("name: mine\n")
    r = run("init", target)
    assert (r.code, r.out) == (2, "")
    one_line(r.err, f"{target / 'workflows' / 'publish.lobster'}: already exists")
    assert tree(target) == {"workflows/publish.lobster": b"name: mine\n"}
    assert sorted(p.name for p in target.iterdir()) == ["workflows"]


def test_a_file_where_a_folder_goes_is_refused(run: Run, tmp_path: Path) -> None:
    target = tmp_path / "p"
    target.mkdir()
    (target / "packages").write_text("not a folder\n")
    r = run("init", target)
    assert r.code == 2
    one_line(r.err, f"{target / 'packages'}: exists and is not a folder")
    assert tree(target) == {"packages": b"not a folder\n"}


@pytest.mark.parametrize("below", ["", "sub"])
def test_dir_that_is_a_file_is_refused(run: Run, tmp_path: Path, below: str) -> None:
    f = tmp_path / "afile"
    f.write_text("x\n")
    r = run("init", f / below if below else f)
    assert (r.code, r.out) == (2, "")
    one_line(r.err, f"{f}: exists and is not a folder")
    assert f.read_text() == "x\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_file_that_appears_after_the_check_is_not_replaced(
        run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check before writing cannot see a file created a moment later: the write itself
    refuses to replace one (files.write_bytes(new=True)), naming it."""
    from clawtower.cli import init

    target = tmp_path / "proj"
    late = target / "flows.yaml"

    def no_conflict_then_a_file(target_: Path, files: list[Path]) -> None:
        late.parent.mkdir(parents=True)
        late.write_text("mine\n")
        return None

    monkeypatch.setattr(init, "conflict", no_conflict_then_a_file)
    r = run("init", target)
    assert r.code == 2, r.err
    one_line(r.err, f"{late}: already exists")
    assert late.read_text() == "mine\n"
