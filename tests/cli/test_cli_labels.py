"""Issue 39, trap 8: errors and labels that mislead. Each test names what a first-hour user
saw wrong and what the CLI says now."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import Run


def test_unknown_agent_on_a_fresh_home_names_the_builtin_cast(run: Run, db: Path,
                                                              home: Path) -> None:
    r = run("session", "new", "--agent", "nobody", "--db", db)
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert "clawtower.yaml has" not in r.err
    assert "the built-in simulator cast has ada, ben" in r.err
    assert f"no clawtower.yaml at {home / 'clawtower.yaml'}" in r.err


def test_a_command_without_its_action_lists_the_actions(run: Run) -> None:
    r = run("memory")
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert "ACTION (one of: list, show, search, put, forget" in r.err
    assert "usage: clawtower memory" in r.err
    r = run("agents", "spec")
    assert r.code == 2 and "(one of: list, show, set, import)" in r.err
    # a missing argument that is not the action is not followed by the actions
    r = run("memory", "search")
    assert r.code == 2 and "one of:" not in r.err


def test_spec_set_warns_of_a_skill_that_does_not_exist(run: Run, db: Path,
                                                       home: Path) -> None:
    skill = home / "skills" / "release-notes" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: release-notes\ndescription: How we write them.\n---\nBody.\n")
    r = run("agents", "spec", "set", "x", "--skills", "release-notes,relase-notes", "--db", db)
    assert r.code == 0, r.err
    assert r.err.count("\n") == 1, r.err
    assert "warning: agent spec x: policy.skills 'relase-notes': no such skill" in r.err
    assert "(known: release-notes)" in r.err
    r = run("agents", "spec", "set", "x", "--skills", "release-notes", "--db", db)
    assert r.code == 0 and r.err == ""


def test_spec_set_refuses_a_gateway_token_file_that_does_not_exist(run: Run, db: Path,
                                                                   tmp_path: Path) -> None:
    missing = tmp_path / "gateway.token"
    spec = tmp_path / "spec.yaml"
    spec.write_text("defaults:\n  acp:\n    openclaw:\n      url: ws://127.0.0.1:18789\n"
                    f"      token_file: '{missing}'\n      agent: main\n")
    r = run("agents", "spec", "set", "oc", "--file", spec, "--db", db)
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert f"openclaw.token_file {missing} does not exist" in r.err
    r = run("agents", "spec", "list", "--db", db)
    assert "oc" not in r.out
    missing.write_text("secret\n")
    r = run("agents", "spec", "set", "oc", "--file", spec, "--db", db)
    assert r.code == 0, r.err


def test_a_spec_on_a_gateway_or_harness_shows_what_runs_it(run: Run, db: Path,
                                                          tmp_path: Path) -> None:
    token = tmp_path / "gateway.token"
    token.write_text("secret\n")
    spec = tmp_path / "oc.yaml"
    spec.write_text("defaults:\n  acp:\n    openclaw:\n      url: ws://127.0.0.1:18789\n"
                    f"      token_file: '{token}'\n      agent: main\n")
    assert run("agents", "spec", "set", "oc", "--file", spec, "--db", db).code == 0
    named = tmp_path / "named.yaml"
    named.write_text("defaults:\n  acp: claude\n")
    assert run("agents", "spec", "set", "cc", "--file", named, "--db", db).code == 0
    assert run("agents", "spec", "set", "plain", "--db", db).code == 0
    r = run("agents", "spec", "list", "--db", db)
    rows = {line.split()[1]: line.split()[2] for line in r.out.splitlines()[1:]}
    assert rows == {"oc": "openclaw:main", "cc": "acp:claude", "plain": "simulator/-"}, r.out
    r = run("agents", "spec", "show", "oc", "--db", db)
    assert "runs on openclaw:main" in r.out.splitlines()[0]
    # the console's and the CLI's `/agents` command too
    sid = run("session", "new", "--agent", "oc", "--db", db).out.strip()
    r = run("session", "send", sid, "/agents", "--db", db)
    assert "* oc (" in r.out and ") openclaw:main tools:" in r.out, r.out
    # and the session itself (`session show`; the console's session head says the same)
    r = run("session", "show", sid, "--db", db)
    assert "runs on: openclaw:main" in r.out, r.out


def test_flow_wait_that_times_out_names_the_approval_it_waits_on(run: Run, db: Path,
                                                                 tmp_path: Path) -> None:
    spec = tmp_path / "ada.yaml"
    spec.write_text("policy:\n  tools: [clock.now]\n  approval: {tools: {clock.now: confirm}}\n")
    assert run("agents", "spec", "set", "ada", "--file", spec, "--db", db).code == 0
    r = run("flow", "run", "ada", "#call clock.now {}", "--wait", "--timeout", "3", "--db", db)
    assert r.code == 1, r.err
    pending = run("approvals", "--db", db).out.splitlines()[1].split()[0]
    assert (f"F-1 waits on approval {pending}: clawtower approve {pending}"
            in r.err.splitlines()[-1]), r.err


def test_a_single_memory_hit_does_not_read_as_no_match(run: Run, db: Path) -> None:
    assert run("memory", "put", "shared:notes", "k1", "the deploy key rotates monthly",
               "--db", db).code == 0
    r = run("memory", "search", "shared:notes", "deploy", "--db", db)
    assert r.code == 0, r.err
    mode, hit = r.out.splitlines()
    assert "score: relevance against the best hit" in mode
    assert hit == "1.000 shared:notes k1: the deploy key rotates monthly", r.out
    assert run("memory", "put", "shared:notes", "k2", "deploy deploy on friday",
               "--db", db).code == 0
    lines = run("memory", "search", "shared:notes", "deploy", "--db", db).out.splitlines()[1:]
    assert lines[0].startswith("1.000 shared:notes k2")
    assert 0 < float(lines[1].split()[0]) < 1
