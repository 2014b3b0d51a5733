"""A real two-level flow: SmolLM2-135M on the llama-cpp-python server (OpenAI-compatible;
installed by scripts/install-peers.sh, the test skips with the reason when it is missing).

The root agent is told to split (`split=True`: its decision schema only allows a
decomposition, into one subtask for the one agent it may delegate to, an enum the server's
constrained decoding respects); the helper may delegate to nobody, so its schema only allows
executing. Whatever the small model writes, the flow must end `done` with one REPLY per task
applied once, real token counts, and projections equal to a replay."""

from __future__ import annotations

from typing import Any

from flow_helpers import counts

from clawtower.core.agents.config import config_from_data
from clawtower.core.flows.engine import model_engine
from clawtower.core.flows.plan import FlowLimits
from clawtower.core.flows.service import Flows
from clawtower.core.sessions.service import Sessions
from clawtower.core.sessions.specs import AgentSpecConfig


async def test_real_two_level_flow_with_smollm2(store: Any, llama: str) -> None:
    base = llama
    cfg = config_from_data({
        "providers": {"local": {"kind": "openai", "base_url": base, "models": ["smollm2"],
                                "timeout_s": 120}}}, "peers-test")
    s = Sessions(store)
    for name, subs, tokens in (("lead", ["helper"], 600), ("helper", [], 48)):
        await s.set_spec(name, AgentSpecConfig.model_validate({
            "defaults": {"provider": "local", "model": "smollm2", "temperature": 0.0,
                         "max_output_tokens": tokens},
            "policy": {"subagents": subs}}))
    # one subtask (so its schema allows no dependency: nothing a 135M model can get wrong
    # beyond its words)
    flows = Flows(store, FlowLimits(max_width=1, max_depth=1))
    fid = await flows.start("lead", "Name two colours of the sky.", split=True)
    engine = model_engine(store, cfg, concurrency=2)
    flow = await engine.run_flow(fid, timeout_s=600)
    got = await flows.get(fid)
    assert engine.errors == []
    assert flow["status"] == "done", (flow["error"], got["tasks"])
    tasks = got["tasks"]
    assert tasks[0]["mode"] == "synthesis" and len(tasks) >= 2
    assert all(t["agent"] == "helper" and t["mode"] == "execute" and t["depth"] == 1
               for t in tasks[1:])
    assert all(t["tokens"] > 0 for t in tasks) and flow["result"]
    c = await counts(store, fid)
    assert set(c["sent"].values()) == {1} and set(c["replied"].values()) == {1}
    usage = await store.fetchall("SELECT * FROM usage WHERE subject=?", (fid,))
    assert usage and sum(u["prompt_tokens"] for u in usage) > 0
    assert await store.verify_projections() == []
