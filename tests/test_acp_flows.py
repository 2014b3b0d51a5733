"""`flow run --executor acp:NAME` (issue 21 item 3): a flow's executed node runs as an ACP
prompt of Zed's real example agent, named in clawtower.yaml's acp_agents only; the node's
session is the flow's, its permission request waits in the one approvals list."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from acp_peers import TSX, ZED_AGENT, need

from clawtower.core.agents.config import config_from_data
from clawtower.core.approvals import Approvals
from clawtower.core.flows.brains import PlanBrain
from clawtower.core.flows.engine import FlowEngine
from clawtower.core.flows.service import Flows
from clawtower.core.flows.turns import TurnBrain
from clawtower.core.safe_yaml import load_file
from clawtower.core.sessions.service import Sessions
from clawtower.core.sessions.specs import AgentSpecConfig
from clawtower.core.store import open_store

WAIT_S = 120.0


async def test_a_flow_node_runs_on_the_named_harness(tmp_path: Path) -> None:
    need(TSX, ZED_AGENT)
    path = tmp_path / "clawtower.yaml"
    path.write_text(json.dumps({"acp_agents": {"zed": {
        "command": str(TSX), "args": [str(ZED_AGENT)], "cwd": str(tmp_path)}}}))
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        await Sessions(store).set_spec("worker", AgentSpecConfig())
        fid = await Flows(store).start("worker", "Improve the config", executor="acp:zed")
        brain = TurnBrain(store, PlanBrain(), config=config_from_data(load_file(path), path))
        engine = asyncio.create_task(FlowEngine(store, brain).run_flow(fid, WAIT_S))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while not engine.done():
            assert loop.time() < deadline, "no permission request in time"
            pending = [a for a in await Approvals(store).pending()
                       if a["kind"] == "acp_permission"]
            for a in pending:
                await Approvals(store).approve(a["id"], by="ops")
            await store.wait_for_change(await store.last_seq(), 0.2)
        flow = engine.result()
        assert flow["status"] == "done", flow
        assert "successfully updated" in flow["result"]
        job = await store.fetchone("SELECT * FROM turn_jobs")
        assert job is not None and (job["provider"], job["model"]) == ("acp", "zed")
        run = await store.fetchone("SELECT * FROM acp_runs WHERE subject=?",
                                   (job["session_id"],))
        assert run is not None and run["status"] == "done"
    finally:
        await store.close()
