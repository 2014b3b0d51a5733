"""Each step kind through the Workflows service: shell, env, stdin, on_error, retry, timeouts
(the whole process group dies), parallel, for_each, sub-workflows, pipelines, the output
rule, dry runs; every step recorded in the store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from clawtower.core.workflows.pipeline import LlmAnswer
from clawtower.core.workflows.service import Workflows


def write(tmp_path: Path, text: str, name: str = "wf.lobster") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.fixture
def errs() -> list[str]:
    return []


@pytest.fixture
def wf(store: Any, tmp_path: Path, errs: list[str]) -> Workflows:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    return Workflows(store, env=env, cwd=str(tmp_path), stderr=errs.append)


def ok(envelope: dict[str, Any]) -> list[Any]:
    assert envelope["ok"], envelope
    assert envelope["status"] == "ok"
    return list(envelope["output"])


async def test_shell_steps_env_stdin_and_output_rule(wf: Workflows, tmp_path: Path) -> None:
    f = write(tmp_path, """
args:
  who: {default: team}
env: {W: "${who}"}
steps:
  - id: a
    run: echo '{"n":2}'
  - id: b
    run: cat; printf ' %s %s %s' "$W" "$S" "$LOBSTER_ARG_WHO"
    stdin: $a.json
    env: {S: "$a.json.n"}
  - id: c
    run: pwd
    cwd: sub
""")
    (tmp_path / "sub").mkdir()
    out = ok(await wf.run(f, {"who": "ops"}))
    assert out == [str(tmp_path / "sub") + "\n"]
    run = (await wf.list())[0]
    got = await wf.get(run["id"])
    steps = {s["id"]: s for s in got["steps"]}
    assert steps["b"]["result"]["stdout"] == '{"n":2} ops 2 ops'
    assert [s["status"] for s in got["steps"]] == ["done", "done", "done"]
    assert got["status"] == "ok"
    assert got["output"] == out


async def test_output_is_json_else_stdout_else_empty(wf: Workflows, tmp_path: Path) -> None:
    assert ok(await wf.run(write(tmp_path, "steps:\n  - id: a\n    run: echo '[1,2]'\n"))) == [1, 2]
    assert ok(await wf.run(write(tmp_path, "steps:\n  - id: a\n    run: 'true'\n"))) == []
    f = write(tmp_path, "steps:\n  - id: a\n    run: echo x\n  - id: b\n    run: echo y\n"
                        "    when: false\n")
    assert ok(await wf.run(f)) == ["x\n"]  # the last completed step, not the skipped one


async def test_on_error_policies(wf: Workflows, tmp_path: Path) -> None:
    f = write(tmp_path, """
steps:
  - id: a
    run: echo oops >&2; exit 3
    on_error: continue
  - id: b
    run: echo "$a.error/$a.errorMessage"
  - id: c
    run: exit 1
    on_error: skip_rest
  - id: d
    run: echo never
""")
    out = ok(await wf.run(f))
    assert out == ["true/workflow command failed (3): oops\n"]
    env = await wf.run(write(tmp_path, "steps:\n  - id: a\n    run: exit 4\n"))
    assert env == {"protocolVersion": 1, "ok": False, "error": {
        "type": "runtime_error", "message": "workflow command failed (4): exit 4"}}
    run = (await wf.list())[0]
    assert run["status"] == "failed"


async def test_retry_then_success(wf: Workflows, tmp_path: Path, errs: list[str]) -> None:
    f = write(tmp_path, """
steps:
  - id: flaky
    run: 'if [ -f flag ]; then echo ok; else touch flag; exit 1; fi'
    retry: {max: 3, delay_ms: 1, backoff: exponential, max_delay_ms: 5, jitter: true}
""")
    assert ok(await wf.run(f)) == ["ok\n"]
    assert any("[RETRY] Step 'flaky' failed (attempt 1/3)" in e for e in errs)
    got = await wf.get((await wf.list())[0]["id"])
    assert got["steps"][0]["attempts"] == 2


async def test_timeout_kills_the_whole_process_group(wf: Workflows, tmp_path: Path) -> None:
    marker = tmp_path / "child-survived"
    f = write(tmp_path, f"""
steps:
  - id: slow
    run: (sleep 1; touch {marker}) & sleep 30
    timeout_ms: 200
    on_error: continue
  - id: after
    run: echo "$slow.errorMessage"
""")
    out = ok(await wf.run(f))
    assert out == ["Step 'slow' timed out after 200ms\n"]
    import asyncio

    await asyncio.sleep(1.5)
    assert not marker.exists()  # the background child died with the group


async def test_parallel_all_any_and_timeout(wf: Workflows, tmp_path: Path) -> None:
    f = write(tmp_path, """
steps:
  - id: p
    parallel:
      branches:
        - id: b1
          run: echo '{"v":1}'
        - id: b2
          run: echo plain
  - id: q
    parallel:
      wait: any
      branches:
        - id: fast
          run: echo fast
        - id: slow
          run: sleep 5
  - id: r
    parallel:
      timeout_ms: 100
      branches:
        - id: s
          run: sleep 5
    on_error: continue
  - id: out
    run: echo "$b1.json.v|$p.json.b1.v|$p.stdout|$q.stdout|$r.errorMessage"
""")
    assert ok(await wf.run(f)) == [
        '1|1|{b1:{v:1}}|fast\n|Parallel step r timed out after 100ms\n']  # the shell ate quotes
    bad = write(tmp_path, "steps:\n  - id: p\n    parallel:\n      branches:\n"
                          "        - {id: x, run: 'exit 2'}\n")
    env = await wf.run(bad)
    assert env["error"]["message"] == "Parallel branch failed: workflow command failed (2): exit 2"


async def test_for_each(wf: Workflows, tmp_path: Path) -> None:
    f = write(tmp_path, """
steps:
  - id: list
    run: >-
      echo '["a", {"k": 1}]'
  - id: loop
    for_each: $list.json
    item_var: it
    batch_size: 1
    pause_ms: 1
    steps:
      - id: show
        run: echo "$index.stdout:$it.stdout"
      - id: j
        run: echo '{"n":1}'
        when: $index.json == 1
""")
    assert ok(await wf.run(f)) == [
        {"it": "a", "index": 0, "show": "0:a\n"},
        {"it": {"k": 1}, "index": 1, "show": "1:{k:1}\n", "j": {"n": 1}},
    ]
    bad = write(tmp_path, "steps:\n  - id: l\n    for_each: nope\n    steps:\n"
                          "      - {id: s, run: echo}\n")
    env = await wf.run(bad)
    assert env["error"]["message"] == "Workflow step l for_each: expected array, got string"


async def test_sub_workflow_args_cycle_and_gate(wf: Workflows, tmp_path: Path) -> None:
    write(tmp_path, "args: {who: {default: x}}\nsteps:\n  - id: c\n    run: echo '\"${who}\"'\n",
          "child.lobster")
    f = write(tmp_path, "args: {w: {default: ops}}\nsteps:\n  - id: sub\n"
                        "    workflow: child.lobster\n    workflow_args: {who: '${w}!'}\n")
    assert ok(await wf.run(f)) == ["ops!"]
    write(tmp_path, "steps:\n  - id: g\n    approval: ok?\n", "gate.lobster")
    g = write(tmp_path, "steps:\n  - id: sub\n    workflow: gate.lobster\n", "parent.lobster")
    env = await wf.run(g)
    assert env["error"]["message"] == (
        "Workflow step sub sub-workflow halted for approval. Sub-workflow approval/input gates"
        " are not supported in composition.")
    cyc = write(tmp_path, "steps:\n  - id: me\n    workflow: cyc.lobster\n", "cyc.lobster")
    env = await wf.run(cyc)
    assert "creates a cycle" in env["error"]["message"]


async def test_pipelines_exec_llm_and_unsupported(store: Any, tmp_path: Path) -> None:
    calls: list[tuple[str, list[Any]]] = []

    async def llm(prompt: str, items: list[Any], schema: dict[str, Any] | None,
                  model: str) -> LlmAnswer:
        calls.append((prompt, items))
        return LlmAnswer(data={"label": "ok"}, text='{"label":"ok"}', model="sim")

    wf = Workflows(store, env=dict(os.environ), cwd=str(tmp_path), llm=llm)
    f = write(tmp_path, """
steps:
  - id: a
    pipeline: exec --json --shell 'echo [1,2]'
  - id: b
    pipeline: llm.invoke --prompt 'classify' --output-schema '{"type":"object"}'
    stdin: $a.json
  - id: c
    run: echo "$b.json.output.data.label"
""")
    assert ok(await wf.run(f)) == ["ok\n"]
    assert calls == [("classify", [1, 2])]
    bad = write(tmp_path, "steps:\n  - id: w\n    pipeline: where x=1\n")
    env = await wf.run(bad)
    assert env["error"]["message"].startswith(
        "Workflow step w: pipeline command 'where' is not supported by clawtower")


async def test_dry_run_runs_nothing_and_records_nothing(wf: Workflows, tmp_path: Path,
                                                        errs: list[str]) -> None:
    f = write(tmp_path, "steps:\n  - id: a\n    run: touch made\n  - id: g\n    approval: ok?\n")
    assert ok(await wf.run(f, dry_run=True)) == []
    assert not (tmp_path / "made").exists()
    assert errs[0].startswith("[DRY RUN] Would execute 2 steps:")
    assert "     [approval required]" in errs[0]
    assert await wf.list() == []


async def test_bad_condition_runs_no_step(wf: Workflows, tmp_path: Path) -> None:
    f = write(tmp_path, "steps:\n  - id: a\n    run: touch made\n  - id: b\n    run: echo\n"
                        "    when: $a.stdout ==\n")
    env = await wf.run(f)
    assert env["error"] == {"type": "runtime_error",
                            "message": "Unsupported condition: $a.stdout =="}
    assert not (tmp_path / "made").exists()
    assert await wf.list() == []


async def test_projections_replay(wf: Workflows, store: Any, tmp_path: Path) -> None:
    f = write(tmp_path, "steps:\n  - id: a\n    run: echo 1\n  - id: g\n    approval: ok?\n")
    await wf.run(f)
    assert await store.verify_projections() == []


async def test_cancel_while_running_stops_before_the_next_step(wf: Workflows, store: Any,
                                                               tmp_path: Path) -> None:
    import asyncio

    f = write(tmp_path, "steps:\n  - id: a\n    run: sleep 1\n  - id: b\n    run: touch made\n")
    task = asyncio.create_task(wf.run(f))
    for _ in range(400):
        if await store.fetchall("SELECT 1 FROM workflow_steps WHERE status='running'"):
            break
        await asyncio.sleep(0.01)
    run_id = (await wf.list())[0]["id"]
    await Workflows(store).cancel(run_id, by="ops")  # e.g. from the console
    env = await task
    assert env["status"] == "cancelled"
    assert not (tmp_path / "made").exists()
    assert (await wf.get(run_id))["status"] == "cancelled"
    assert await store.verify_projections() == []


async def test_exec_argv_runs_without_a_shell(wf: Workflows, tmp_path: Path) -> None:
    f = write(tmp_path, """
steps:
  - id: a
    pipeline: exec --json printf '[1,2]'
  - id: b
    pipeline: exec --stdin jsonl cat
    stdin: $a.json
  - id: c
    pipeline: exec no-such-command-xyz
    on_error: continue
  - id: d
    run: echo "$b.json|$c.errorMessage"
""")
    assert ok(await wf.run(f)) == ["[1,2]|exec command not found: no-such-command-xyz\n"]
