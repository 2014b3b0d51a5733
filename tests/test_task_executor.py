"""A task names who runs its implementation step (issue 21 item 3): `executor: acp:NAME`
(a harness of clawtower.yaml's acp_agents) or `builtin`; `task create --executor` sets it.
The attempt's outcome goes through the stored retry rules whichever runs it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from protocol import good_spec

from clawtower.core.agents.config import config_from_data, load_agents
from clawtower.core.agents.registry import AgentSet
from clawtower.core.errors import ValidationError
from clawtower.core.orchestrator import Orchestrator
from clawtower.core.sessions.specs import from_agent_config
from clawtower.core.store.interface import Store
from clawtower.core.tasks.service import Tasks
from clawtower.core.tasks.spec import parse_spec


def test_the_executor_field_is_validated() -> None:
    assert parse_spec({**good_spec().model_dump(), "executor": "acp:zed"}, "t").executor \
        == "acp:zed"
    assert parse_spec({**good_spec().model_dump(), "executor": "builtin"}, "t").executor \
        == "builtin"
    with pytest.raises(ValidationError, match="field 'executor'"):
        parse_spec({**good_spec().model_dump(), "executor": "claude"}, "t.yaml")


async def attempt_of(store: Store, clock: Any, tid: str, agents: AgentSet | None = None
                     ) -> dict[str, Any]:
    o = Orchestrator(store, agents or AgentSet.simulated(), clock=clock)
    try:
        for _ in range(200):
            await o.tick()
            task = await Tasks(store).get(tid)
            done = [a for a in task["attempt_records"] if a["status"] != "running"]
            if done:
                return done[0]
            await asyncio.sleep(0.01)
    finally:
        await o.cancel_inflight()
    raise AssertionError("no attempt finished")


async def test_a_named_harness_runs_the_step_and_an_unknown_one_fails_it(
        store: Store, clock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "clawtower.yaml"
    cfg.write_text(f"acp_agents:\n  gone:\n    command: {tmp_path / 'no-such-harness'}\n")
    monkeypatch.setenv("CLAWTOWER_CONFIG", str(cfg))
    spec = good_spec().model_dump()
    gone = await Tasks(store).create(parse_spec({**spec, "executor": "acp:gone"}, "t"))
    att = await attempt_of(store, clock, gone)
    # the harness ran (and could not start): the attempt failed with its reason
    assert att["status"] == "failed" and "no-such-harness" in str(att), att
    run = await store.fetchone("SELECT * FROM acp_runs WHERE subject=?", (gone,))
    assert run is not None
    unknown = await Tasks(store).create(parse_spec({**spec, "executor": "acp:nope"}, "t"))
    att = await attempt_of(store, clock, unknown)
    assert att["status"] == "failed" and "acp agent 'nope': no such agent" in str(att)
    builtin = await Tasks(store).create(parse_spec({**spec, "executor": "builtin"}, "t"))
    att = await attempt_of(store, clock, builtin)
    assert att["status"] == "succeeded", att  # the simulated executor agent


async def test_clawtower_yaml_names_the_executor_of_implementation_steps(
        store: Store, clock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor agent's `executor: acp:NAME` in clawtower.yaml alone moves the step onto
    the harness; a task's `executor: builtin` keeps it on the executor agent."""
    cfg = tmp_path / "clawtower.yaml"
    cfg.write_text(
        f"acp_agents:\n  gone:\n    command: {tmp_path / 'no-such-harness'}\n"
        "speed: 0\n"
        "agents:\n  builder: {role: executor, executor: 'acp:gone'}\n"
        "  checker: {role: spec_reviewer}\n  critic: {role: quality_reviewer}\n")
    monkeypatch.setenv("CLAWTOWER_CONFIG", str(cfg))
    agents = load_agents(cfg)
    spec = good_spec().model_dump()
    on_yaml = await Tasks(store).create(parse_spec(spec, "t"))
    att = await attempt_of(store, clock, on_yaml, agents)
    assert att["status"] == "failed" and "no-such-harness" in str(att), att
    assert await store.fetchone("SELECT 1 FROM acp_runs WHERE subject=?", (on_yaml,))
    builtin = await Tasks(store).create(parse_spec({**spec, "executor": "builtin"}, "t"))
    att = await attempt_of(store, clock, builtin, agents)
    assert att["status"] == "succeeded", att
    assert await store.fetchone("SELECT 1 FROM acp_runs WHERE subject=?", (builtin,)) is None


def test_an_agent_executor_becomes_its_spec_harness(tmp_path: Path) -> None:
    cfg = config_from_data({"agents": {"coder": {"executor": "acp:zed"}, "plain": {}}},
                           tmp_path / "c.yaml")
    assert from_agent_config(cfg, "coder").defaults.acp == "zed"
    assert from_agent_config(cfg, "plain").defaults.acp is None
    with pytest.raises(ValidationError, match=r"agents\.coder\.executor"):
        config_from_data({"agents": {"coder": {"executor": "zed"}}}, tmp_path / "c.yaml")
