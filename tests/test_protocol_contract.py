"""Every protocol on both backends (issue 35): one contract, parametrised over the protocol
(flows, meetings, sessions, triggers, workflows) and the store (SQLite, PostgreSQL), as the
store's own tests are. Tasks have theirs in tests/test_store_engines.py.

For each protocol:
  acceptance  its work, created the way a user does (the core API the CLI calls), is run by
              the composed engine (core/workers.py: `build_engine`, every worker) on the
              simulator until idle, and ends correctly, exactly once;
  kill -9     a child process running it (the composed engine, tests/helpers/engine_host.py,
              or for meetings the user's own foreground runner, `clawtower meeting resume`)
              on a slow simulator is SIGKILLed mid-work, once the store shows work recorded;
              a fresh engine here takes it over from the dead process and finishes it:
              nothing lost, nothing applied twice (counted from the log);
  until idle  `until_idle` never returns while the protocol has a ready item (the acceptance
              test), and for flows and meetings a real `clawtower serve --until-idle
              --no-http` run leaves none (the others: tests/cli/test_cli_serve_until_idle.py,
              tests/test_engine_workers.py, tests/triggers/test_until_idle.py).

Waits are on store conditions with generous limits; no timed assertion.
"""

from __future__ import annotations

import abc
import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from flow_helpers import counts
from hook_expert import install_hook_expert
from procs import HELPERS, ROOT, child_env, die_with_parent
from session_helpers import wait_for

from clawtower.core.agents.config import load_agents, load_config
from clawtower.core.sessions.rerun import REUSED
from clawtower.core.store import open_store
from clawtower.core.store.interface import Store
from clawtower.core.workers import build_engine

CLAWTOWER = Path(sys.executable).with_name("clawtower")
HOST = str(HELPERS / "engine_host.py")
PROTOCOLS = ("flows", "meetings", "sessions", "triggers", "workflows")
WAIT_S = 120.0  # generous: a loaded 2-core machine beside another suite
SESSION_TTL_S = 1.5  # the killed engine's turn-job leases (taken over once they lapse)

pytestmark = pytest.mark.both_backends

# -- the simulator's casts: `fast` for the engine in the test, `slow` for the killed one ---

FLOWS = (ROOT / "examples" / "flows" / "agents.yaml").read_text()
MEETING_AGENTS = ("agents:\n  a: {role: participant}\n  b: {role: participant}\n"
                  "  c: {role: participant}\n")
CONFIGS = {
    "flows": {"fast": FLOWS.replace("speed: 0.2", "speed: 0"),
              "slow": FLOWS.replace("speed: 0.2", "speed: 1")
                           .replace("delay_ms: [200, 700]", "delay_ms: [300, 300]")},
    # round 1: b disagrees; round 2 (slow): b and c think for 30 s, the kill lands there;
    # the adopting engine asks b and c again (its scripts start afresh), never a
    "meetings": {
        "fast": "seed: 3\nspeed: 0\n" + MEETING_AGENTS + "scripts:\n"
                "  a: {meeting: [{stance: AGREE}]}\n  b: {meeting: [{stance: AGREE}]}\n"
                "  c: {meeting: [{stance: AGREE}]}\n",
        "slow": "seed: 3\nspeed: 1\ndelay_ms: [0, 0]\n" + MEETING_AGENTS + "scripts:\n"
                "  a: {meeting: [{stance: AGREE}, {stance: AGREE}]}\n"
                "  b: {meeting: [{stance: DISAGREE}, {stance: AGREE, delay_ms: 30000}]}\n"
                "  c: {meeting: [{stance: AGREE}, {stance: AGREE, delay_ms: 30000}]}\n"},
    "sessions": {"fast": "speed: 0\n", "slow": "speed: 1\ndelay_ms: [800, 800]\n"},
    # the trigger's process is one llm-task step: slow, it is still running at the kill
    "triggers": {"fast": "speed: 0\n", "slow": "speed: 1\ndelay_ms: [30000, 30000]\n"},
    "workflows": {"fast": "speed: 0\n", "slow": "speed: 0\n"},
}


def config_file(folder: Path, protocol: str, pace: str) -> Path:
    path = folder / f"{protocol}-{pace}.yaml"
    path.write_text(CONFIGS[protocol][pace])
    return path


async def one(store: Store, sql: str, args: tuple[Any, ...] = ()) -> Any:
    row = await store.fetchone(sql, args)
    assert row is not None
    return next(iter(row.values()))


async def types(store: Store, entity_id: str | None = None) -> Counter[str]:
    return Counter(e.type for e in await store.events_after(0, 1_000_000, entity_id=entity_id))


# -- the protocols: create the work, see it under way, check it ended once ----------------

class Protocol(abc.ABC):
    """One protocol's side of the contract. `create` makes its work the way a user does and
    returns its id; `under_way` (for the kill) is true once work is recorded; `status` (a
    query of the id) reads `running` until the work has ended; `check` asserts it ended
    correctly, exactly once (`killed`: after a take-over); `lease(id)`: the lease a fresh
    engine takes over from the killed process (None: the check sees the take-over)."""

    name = ""
    status = ""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def lease(self, wid: str) -> str | None:
        return None

    @abc.abstractmethod
    async def create(self, store: Store) -> str:
        ...

    @abc.abstractmethod
    async def under_way(self, store: Store, wid: str) -> bool:
        ...

    @abc.abstractmethod
    async def check(self, store: Store, wid: str, killed: bool) -> None:
        ...

    def env(self) -> dict[str, str]:
        return {"CLAWTOWER_HOME": str(self.folder / "home")}


class FlowsProtocol(Protocol):
    """`flow run lead ...` without --wait: Flows.start, left for the engine."""

    name = "flows"
    status = "SELECT status FROM flows WHERE id=?"

    def lease(self, wid: str) -> str | None:
        return "flows"  # one engine drives the flows

    async def create(self, store: Store) -> str:
        from flow_helpers import specs

        from clawtower.core.flows.service import Flows

        await specs(store, {"lead": ["researcher", "writer"], "researcher": ["fetcher"],
                            "writer": [], "fetcher": []})
        return await Flows(store).start("lead", "Write a briefing on the Q3 numbers")

    async def under_way(self, store: Store, wid: str) -> bool:
        c = await counts(store, wid)
        return sum(c["replied"].values()) >= 1

    async def check(self, store: Store, wid: str, killed: bool) -> None:
        from clawtower.core.flows.service import Flows

        got = await Flows(store).get(wid)
        assert (got["flow"]["status"], got["flow"]["done"]) == ("done", 6), got["flow"]
        c = await counts(store, wid)
        tasks = [t["task_id"] for t in got["tasks"]]
        assert len(tasks) == 6
        assert {t: (c["sent"][t], c["replied"][t]) for t in tasks} == \
            dict.fromkeys(tasks, (1, 1)), c  # dispatched once, replied once: none lost
        assert (await types(store, wid))["flow.finished"] == 1


class MeetingsProtocol(Protocol):
    """A meeting recorded as `meeting run` opens it (meeting.started and its lease, in one
    commit) whose process then went away before its first round: the engine adopts it."""

    name = "meetings"
    status = "SELECT status FROM meetings WHERE id=?"

    def lease(self, wid: str) -> str | None:
        return f"meeting:{wid}"

    async def create(self, store: Store) -> str:
        return await left_meeting(store, load_agents(config_file(self.folder, self.name,
                                                                 "fast")))

    async def under_way(self, store: Store, wid: str) -> bool:
        return await store.fetchone("SELECT 1 FROM meeting_replies WHERE meeting_id=? AND"
                                    " round=2 AND agent='a'", (wid,)) is not None

    async def check(self, store: Store, wid: str, killed: bool) -> None:
        from clawtower.core.meetings.service import Meetings

        m = await Meetings(store).get(wid)
        assert (m["status"], m["result"], m["reason"]) == ("ended", "FULL", "consensus"), m
        rows = await store.fetchall("SELECT round, agent FROM meeting_replies WHERE"
                                    " meeting_id=?", (wid,))
        replies = Counter((int(r["round"]), str(r["agent"])) for r in rows)
        rounds = 2 if killed else 1
        assert replies == dict.fromkeys(((n, x) for n in range(1, rounds + 1)
                                         for x in "abc"), 1), replies  # asked once each
        t = await types(store, wid)
        assert (t["meeting.round_started"], t["meeting.ended"]) == (rounds, 1), t


class SessionsProtocol(Protocol):
    """`session send` without --wait: a turn job queued for the engine's session worker."""

    name = "sessions"
    status = "SELECT status FROM turn_jobs WHERE session_id=?"

    async def create(self, store: Store) -> str:
        from clawtower.core.sessions.service import Sessions

        s = Sessions(store)
        sid = await s.create()
        await s.send(sid, "#work 4 the quarterly numbers")
        return sid

    async def under_way(self, store: Store, wid: str) -> bool:
        return await store.fetchone(
            "SELECT 1 FROM turn_jobs j WHERE j.session_id=? AND j.status='running' AND"
            " EXISTS (SELECT 1 FROM turns t JOIN events e ON e.entity='turn' AND"
            " e.entity_id=t.id AND e.type='turn.tool_result' WHERE t.subject=j.session_id)",
            (wid,)) is not None

    async def check(self, store: Store, wid: str, killed: bool) -> None:
        from clawtower.core.sessions.service import Sessions

        jobs = await store.fetchall("SELECT id, status, attempt FROM turn_jobs WHERE"
                                    " session_id=?", (wid,))
        assert [j["status"] for j in jobs] == ["done"], jobs
        if killed:
            assert jobs[0]["attempt"] > 1, jobs  # taken over from the killed worker
        msgs = await store.fetchall("SELECT role, meta FROM session_messages WHERE"
                                    " session_id=?", (wid,))
        assert [m["role"] for m in msgs] == ["user", "assistant"], msgs  # answered once
        assert json.loads(msgs[1]["meta"]).get("job") == jobs[0]["id"]
        final = (await Sessions(store).get(wid))["messages"][-1]["text"]
        assert final.startswith(("Done:", "Resumed and finished")), final
        # each of the 4 tool rounds ran once: a result recorded before the kill is reused,
        # never run again; a call cut by the kill is reported as interrupted, not re-run
        evs = [e for e in await store.events_after(0, 1_000_000)
               if e.type in ("turn.tool_called", "turn.tool_result")]
        called = {(e.entity_id, e.payload.call_id):  # type: ignore[attr-defined]
                  e.payload.arguments for e in evs  # type: ignore[attr-defined]
                  if e.type == "turn.tool_called"}
        ran: Counter[str] = Counter()  # results of calls that ran
        cut: Counter[str] = Counter()  # calls made, their worker killed before the result
        for e in evs:
            p: Any = e.payload
            if e.type == "turn.tool_result" and not p.content.startswith(REUSED):
                (cut if p.error_kind == "interrupted" else ran)[
                    called[(e.entity_id, p.call_id)]] += 1
        assert len(ran + cut) == 4 and set((ran + cut).values()) == {1}, (ran, cut)


class TriggersProtocol(Protocol):
    """`triggers fire hook-expert inbound`: an invocation queued for the trigger worker,
    run as the expert's process (one llm-task step on the simulator)."""

    name = "triggers"
    status = "SELECT status FROM trigger_items WHERE id=?"

    def lease(self, wid: str) -> str | None:
        return f"trigger:{wid}"

    async def create(self, store: Store) -> str:
        from clawtower.core.triggers.catalog import Catalog
        from clawtower.core.triggers.intake import accept

        spec = Catalog().get("hook-expert", "inbound")
        assert spec is not None
        return str((await accept(store, spec, {"event_id": "e-1", "contact_id": "c-1"},
                                 "cli"))["id"])

    async def under_way(self, store: Store, wid: str) -> bool:
        return await store.fetchone(
            "SELECT 1 FROM trigger_items t JOIN events e ON e.entity_id=t.run_id AND"
            " e.type='workflow.step_started' WHERE t.id=? AND t.status='running'",
            (wid,)) is not None

    async def check(self, store: Store, wid: str, killed: bool) -> None:
        row = await store.fetchone("SELECT status, run_id FROM trigger_items WHERE id=?",
                                   (wid,))
        assert row is not None and row["status"] == "done", row
        t = await types(store, wid)
        # linked to one run (a take-over follows the run it found, never starts another),
        # finished once
        assert (t["trigger.linked"], t["trigger.finished"], t["trigger.failed"]) == \
            (1, 1, 0), t
        run = await store.fetchone("SELECT status FROM workflow_runs WHERE id=?",
                                   (row["run_id"],))
        assert run is not None and run["status"] == "ok", run
        assert await one(store, "SELECT count(*) AS n FROM workflow_runs") == 1


WORKFLOW = """name: contract
steps:
{steps}"""


class WorkflowsProtocol(Protocol):
    """`workflow run --detach`: a run started for whichever engine adopts it
    (Workflows.enqueue). Each step logs that it ran, then takes a moment."""

    name = "workflows"
    status = "SELECT status FROM workflow_runs WHERE id=?"
    steps = 4

    def lease(self, wid: str) -> str | None:
        return f"workflow:{wid}"

    async def create(self, store: Store) -> str:
        from clawtower.core.workflows.service import Workflows

        path = self.folder / "contract.lobster"
        log = self.folder / "ran.log"
        path.write_text(WORKFLOW.format(steps="".join(
            f"  - id: s{i}\n    run: echo s{i} >> {log}; sleep 0.4\n    x-idempotent: true\n"
            for i in range(self.steps))))
        return await Workflows(store, cwd=str(self.folder), stderr=lambda _t: None).enqueue(
            str(path))

    async def under_way(self, store: Store, wid: str) -> bool:
        return (await types(store, wid))["workflow.step_finished"] >= 1

    async def check(self, store: Store, wid: str, killed: bool) -> None:
        run = await store.fetchone("SELECT status FROM workflow_runs WHERE id=?", (wid,))
        assert run is not None and run["status"] == "ok", run
        evs = await store.events_after(0, 1_000_000, entity_id=wid)
        finished = Counter(e.payload.step_id for e in evs  # type: ignore[attr-defined]
                           if e.type == "workflow.step_finished")
        assert finished == {f"s{i}": 1 for i in range(self.steps)}, finished
        ran = Counter((self.folder / "ran.log").read_text().split())
        assert set(ran) == {f"s{i}" for i in range(self.steps)}, ran  # none lost
        # a step runs again only if the kill cut it (it is marked safe to repeat): at most
        # the one in flight
        assert sum(ran.values()) - self.steps <= (1 if killed else 0), ran


KINDS: dict[str, type[Protocol]] = {p.name: p for p in (
    FlowsProtocol, MeetingsProtocol, SessionsProtocol, TriggersProtocol, WorkflowsProtocol)}


async def left_meeting(store: Store, agents: Any) -> str:
    """A meeting as `meeting run` opens it, whose process left before its first round (its
    short lease lapses at once): orphaned, for an engine to adopt."""
    from clawtower.core.meetings.config import MeetingConfig
    from clawtower.core.meetings.coordinator import Coordinator

    config = MeetingConfig(topic="Ship it?", participants=["a", "b", "c"], max_rounds=5)
    mid = await Coordinator(store, agents, lease_ttl_s=0.05).open(config)
    from clawtower.core.meetings.service import Meetings

    await wait_for(lambda: _orphaned(Meetings(store), mid), WAIT_S)  # its lease lapsed
    return mid


async def _orphaned(meetings: Any, mid: str) -> bool:
    return bool((await meetings.get(mid))["orphaned"])


@pytest.fixture
def protocol(request: pytest.FixtureRequest, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> Protocol:
    p = KINDS[request.param](tmp_path)
    monkeypatch.delenv("CLAWTOWER_CONFIG", raising=False)
    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CLAWTOWER_OPERATOR", "tester")
    if p.name == "triggers":
        install_hook_expert(tmp_path)
    return p


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "protocol" in metafunc.fixturenames and not any(
            m.args and m.args[0] == "protocol" for m in metafunc.definition.iter_markers(
                "parametrize")):
        metafunc.parametrize("protocol", PROTOCOLS, indirect=True)


async def run_engine(store: Store, folder: Path, protocol: str, hold: bool = True) -> None:
    """A fresh composed engine (every worker) on the fast cast, until idle. `hold=False`:
    the store does not hold writes through a storage fault, so the fault reaches the
    protocol as in the foreground (tests/test_storage_fault_protocols.py)."""
    cfg = config_file(folder, protocol, "fast")
    engine = build_engine(store, load_agents(cfg), config=load_config(cfg),
                          session_kw={"lease_ttl_s": SESSION_TTL_S})
    runner = asyncio.create_task(engine.run())
    try:
        if not hold:
            store.set_hold(False)
        assert await engine.until_idle(timeout_s=WAIT_S), engine.errors
        assert engine.errors == []
    finally:
        engine.stop()
        await asyncio.wait_for(runner, 60)


# -- 1. acceptance ------------------------------------------------------------------------

async def test_acceptance_until_idle_leaves_it_done_once(protocol: Protocol,
                                                         store_target: str) -> None:
    store = await open_store(store_target)
    try:
        wid = await protocol.create(store)
        await run_engine(store, protocol.folder, protocol.name)  # until_idle: nothing ready
        await protocol.check(store, wid, killed=False)
        assert await store.verify_projections() == []
    finally:
        await store.close()


# -- 2. kill -9 ---------------------------------------------------------------------------

def spawn(protocol: Protocol, target: str, wid: str) -> subprocess.Popen[str]:
    slow = config_file(protocol.folder, protocol.name, "slow")
    env = child_env(CLAWTOWER_CONFIG=str(slow), **protocol.env())
    if protocol.name == "meetings":  # the user's own foreground runner of a meeting
        argv = [str(CLAWTOWER), "meeting", "resume", wid, "--config", str(slow),
                "--db", target]
    else:
        argv = [sys.executable, HOST, target, str(slow), str(SESSION_TTL_S)]
    return subprocess.Popen(argv, env=env, cwd=protocol.folder, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=die_with_parent)


async def test_kill_9_mid_work_then_a_fresh_engine_finishes_it_once(
        protocol: Protocol, store_target: str) -> None:
    store = await open_store(store_target)
    try:
        wid = await protocol.create(store)
        child = spawn(protocol, store_target, wid)
        try:
            async def under_way() -> bool:
                if child.poll() is not None:
                    pytest.fail(f"the child exited {child.returncode} before the kill:"
                                f" {child.stderr.read() if child.stderr else ''}")
                return await protocol.under_way(store, wid)

            await wait_for(under_way, WAIT_S)  # work recorded, not finished
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL
        assert await one(store, protocol.status, (wid,)) == "running", "killed after the end"
        await run_engine(store, protocol.folder, protocol.name)
        await protocol.check(store, wid, killed=True)
        lease = protocol.lease(wid)
        if lease is not None:  # taken over from the killed process (its pid in the owner)
            took = [e.payload.took_over_from  # type: ignore[attr-defined]
                    for e in await store.events_after(0, 1_000_000, entity_id=lease)
                    if e.type == "lease.acquired"]
            assert any(f":{child.pid}:" in (t or "") for t in took), (lease, took)
        assert await store.verify_projections() == []
    finally:
        await store.close()


# -- 3. `serve --until-idle` (the CLI) for the protocols without such a run elsewhere --------

@pytest.mark.parametrize("protocol", ["flows", "meetings"], indirect=True)
async def test_serve_until_idle_leaves_no_ready_item(protocol: Protocol,
                                                     store_target: str) -> None:
    store = await open_store(store_target)
    try:
        wid = await protocol.create(store)
        fast = config_file(protocol.folder, protocol.name, "fast")
        r = await asyncio.to_thread(
            subprocess.run, [str(CLAWTOWER), "serve", "--until-idle", "--no-http",
                             "--config", str(fast), "--db", store_target],
            capture_output=True, text=True, timeout=WAIT_S * 2, cwd=protocol.folder,
            env=child_env(CLAWTOWER_CONFIG=str(fast), **protocol.env()))
        assert r.returncode == 0, r.stdout + r.stderr
        await protocol.check(store, wid, killed=False)
    finally:
        await store.close()
