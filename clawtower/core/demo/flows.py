"""The flows part of `clawtower demo` (and of the console's screenshots): a board briefing
split two levels deep and finished, a migration that failed deep in its tree (the ERROR
reached the root, the sibling still running was cancelled), and (with `live`) a release
check left running for the console's flow engine to drive while the operator watches.

Deterministic: decisions and texts are scripted by subtask id in the demo's agents file
(examples/demo/agents.yaml, `q3-*`, `mig-*`, `rr-*`).
"""

from __future__ import annotations

from pathlib import Path

from ..agents.config import ClawtowerConfig, config_from_data
from ..flows.service import Flows
from ..safe_yaml import load_file
from ..sessions.service import Sessions
from ..sessions.specs import AgentSpecConfig
from ..store.interface import Store
from ..workers import build_engine

AGENTS: dict[str, list[str]] = {
    "planner": ["analyst", "auditor", "writer"], "analyst": ["fetcher"],
    "auditor": ["fetcher"], "writer": [], "fetcher": [],
}
PROMPTS = {
    "planner": "You plan work and delegate it.", "analyst": "You gather and check figures.",
    "auditor": "You audit releases.", "writer": "You write clearly and briefly.",
    "fetcher": "You extract data from files.",
}


def demo_config(agents_file: str | Path, speed: float = 0.0) -> ClawtowerConfig:
    data = load_file(agents_file)
    data["speed"] = speed
    return config_from_data(data, agents_file)


async def seed_flows(store: Store, agents_file: str | Path, *, live: bool = True,
                     timeout_s: float = 120.0) -> list[str]:
    """Seed the flows' agent specs, run the finished and the failed flow; returns the flow
    ids (the live one last, left running)."""
    s = Sessions(store)
    for name, subs in AGENTS.items():
        await s.set_spec(name, AgentSpecConfig.model_validate({
            "defaults": {"system_prompt": PROMPTS[name]}, "policy": {"subagents": subs}}),
            source="demo", by="demo")
    flows = Flows(store)
    ids = []
    quick = demo_config(agents_file, speed=0.01)  # mig-notes (60 s) is still in flight
    for root, text in (("q3-brief", "Write the Q3 board briefing"),
                       ("mig-plan", "Migrate the billing tables to the new cluster")):
        fid = await flows.start("planner", text, root_id=root, by="demo")
        engine = build_engine(store, None, workers=["flows"], config=quick,
                              flow_kw={"flows": {fid}, "owner": "demo-seed"})
        if not await engine.run_until_idle(timeout_s):
            raise TimeoutError(f"demo: flow {fid} did not finish")
        ids.append(fid)
    if live:
        ids.append(await flows.start("planner", "Check the release is ready to ship",
                                     root_id="rr-check", by="demo"))
    return ids


__all__ = ["AGENTS", "demo_config", "seed_flows"]
