"""A retry's backoff scales with the simulated world's speed when the script says so (the
demo's agents do): `clawtower demo --speed 0` waits out no real seconds on its flaky and
doomed tasks, while real agents, and scripts that do not opt in, keep the policy's bounded
backoff."""

from __future__ import annotations

from pathlib import Path

from clawtower.core import (
    AgentSet,
    FakeClock,
    Orchestrator,
    Tasks,
    load_script,
    load_spec,
    open_store,
)
from clawtower.core.agents.simulator import AgentDef

DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo"


async def _retry_wait(tmp_path: Path, speed: float, follows: bool = True
                      ) -> tuple[float, str]:
    """Drive the demo's flaky task once; (the backoff its retry got, its final phase)."""
    clock = FakeClock()
    store = await open_store(str(tmp_path / f"s{speed}.db"), clock=clock)
    try:
        script = load_script(DEMO / "agents.yaml").model_copy(
            update={"speed": speed, "delay_ms": (0, 0), "backoff_follows_speed": follows})
        tid = await Tasks(store).create(load_spec(DEMO / "specs" / "02-flaky-search.yaml"),
                                        actor="demo")
        await Orchestrator(store, AgentSet.simulated(script), clock=clock).drive(tid)
        [row] = await store.fetchall(
            "SELECT ts, json_extract(payload, '$.not_before') AS nb FROM events"
            " WHERE entity_id=? AND type='retry.scheduled'", (tid,))
        task = await Tasks(store).get(tid)
        return float(row["nb"]) - float(row["ts"]), str(task["phase"])
    finally:
        await store.close()


async def test_speed_zero_retries_at_once(tmp_path: Path) -> None:
    wait, phase = await _retry_wait(tmp_path, 0.0)
    assert wait == 0.0
    assert phase == "completed"  # the retry still happened, and passed


async def test_normal_speed_keeps_the_policy_backoff(tmp_path: Path) -> None:
    wait, phase = await _retry_wait(tmp_path, 1.0)
    assert wait == 1.0  # backoff_seconds(1): bounded exponential from 1 s
    assert phase == "completed"


async def test_a_script_that_does_not_opt_in_keeps_the_policy(tmp_path: Path) -> None:
    wait, _ = await _retry_wait(tmp_path, 0.0, follows=False)
    assert wait == 1.0


def test_the_demo_agents_opt_in() -> None:
    assert load_script(DEMO / "agents.yaml").backoff_follows_speed is True


def test_time_scale_is_one_unless_every_agent_is_simulated() -> None:
    script = load_script(DEMO / "agents.yaml")
    assert AgentSet.simulated(script.model_copy(update={
        "speed": 0.0, "backoff_follows_speed": False})).time_scale() == 1.0
    assert AgentSet.simulated(script.model_copy(update={"speed": 0.25})).time_scale() == 0.25
    assert AgentSet.simulated(script.model_copy(update={"speed": 5.0})).time_scale() == 1.0
    mixed = AgentSet.simulated(script)
    mixed.agents["real"] = AgentDef(role="executor", provider="anthropic")
    assert mixed.time_scale() == 1.0
