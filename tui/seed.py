"""A deterministic demo store for screenshots and console tests.

Same inputs, same store: a stepping fake clock stamps events, approval ids come from a seeded
generator, and tasks are driven one after another (no concurrency), through the public core
API and the simulated agents of examples/demo.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from core import (
    AgentSet,
    FakeClock,
    MemorySink,
    Orchestrator,
    Role,
    Tasks,
    TaskSpec,
    load_script,
    load_spec,
    open_store,
)
from core.tasks import commands as _commands

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "demo"
START = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


class SteppingClock(FakeClock):
    """A fake clock that moves `step` seconds every time it is read."""

    def __init__(self, start: float = START, step: float = 1.25) -> None:
        super().__init__(start)
        self.step = step

    def now(self) -> float:
        self.advance(self.step)
        return super().now()


@contextlib.contextmanager
def deterministic_ids(seed: int = 7) -> Iterator[None]:
    """Approval ids and idempotency keys from a seeded generator instead of `secrets`."""
    rng = random.Random(seed)
    namespace = vars(_commands)
    if "secrets" not in namespace:  # core changed how it draws ids: stay usable, if random
        yield
        return
    original = namespace["secrets"]
    namespace["secrets"] = SimpleNamespace(token_hex=lambda n=16: rng.randbytes(n).hex())
    try:
        yield
    finally:
        namespace["secrets"] = original


EXTRA_SPECS: list[dict[str, Any]] = [
    {"title": "Rotate the API signing keys",
     "goal": "Replace the signing keys of the public API before they expire on Friday.",
     "outputs": ["ops/keys/rotation-2027-01.md"],
     "acceptance_criteria": ["Tokens signed with the old key verify for 24 hours after rotation",
                             "The new public key is published at /.well-known/jwks.json"],
     "side_effects": [{"kind": "secret-rotation", "description": "Rotate the signing key pair",
                       "target": "vault://api/signing"}]},
    {"title": "Rate-limit the public search API",
     "goal": "Cap anonymous search at 10 requests per second per client.",
     "outputs": ["src/api/ratelimit.py", "tests/test_ratelimit.py"],
     "acceptance_criteria": ["The 11th request within a second gets HTTP 429 with Retry-After",
                             "Authenticated clients keep their current limits"]},
    {"title": "Verify the nightly backups",
     "goal": "Restore last night's backup into a scratch database and compare row counts.",
     "outputs": ["ops/backup-check.sh"],
     "acceptance_criteria": ["The check fails loudly when any table differs by one row or more"]},
]


async def seed_demo(db_path: str | Path, *, specs: Sequence[str | Path] | None = None,
                    extra: bool = True, script_path: str | Path | None = None,
                    seed: int = 7) -> dict[str, Any]:
    """Build the demo store at `db_path` (which should not exist yet). Returns a summary."""
    clock = SteppingClock()
    store = await open_store(db_path, clock=clock)
    try:
        script = load_script(script_path or EXAMPLES / "agents.yaml")
        script.speed = 0
        orch = Orchestrator(store, AgentSet.simulated(script), clock=clock, effects=MemorySink())
        tasks = Tasks(store)
        files = sorted(EXAMPLES.glob("specs/*.yaml")) if specs is None else [Path(s)
                                                                             for s in specs]
        ids: list[str] = []
        with deterministic_ids(seed):
            for f in files:
                source = f"examples/demo/specs/{f.name}"
                ids.append(await tasks.create(load_spec(f), source=source))
            for tid in ids:
                await orch.drive(tid)
            if extra:
                ids += await _seed_extra(tasks, orch)
        return {"tasks": ids, "seq": await store.last_seq()}
    finally:
        await store.close()


async def _seed_extra(tasks: Tasks, orch: Orchestrator) -> list[str]:
    """Tasks caught mid-flight, so the screenshots show live phases too."""
    rotate, ratelimit, backups = (TaskSpec.model_validate(s) for s in EXTRA_SPECS)
    ids = []
    tid = await tasks.create(rotate, source="console demo")
    await orch.drive(tid)  # ends awaiting an operator's approval
    ids.append(tid)
    tid = await tasks.create(ratelimit, source="console demo")
    await tasks.transition(tid, "spec_review", "spec complete: submitted for review")
    await tasks.review(tid, role=Role.SPEC_REVIEWER, reviewer="checker", verdict="approved")
    await tasks.transition(tid, "execution_ready", "spec review approved the spec")
    await tasks.transition(tid, "executing", "starting attempt 1", model="sim-standard",
                           escalation_model="sim-strong")
    await tasks.heartbeat(tid, 1, actor="builder", note="started")
    await tasks.checkpoint(tid, 1, {"step": 1, "of": 3}, actor="builder")
    ids.append(tid)
    tid = await tasks.create(backups, source="console demo")
    await tasks.transition(tid, "spec_review", "spec complete: submitted for review")
    ids.append(tid)
    return ids
