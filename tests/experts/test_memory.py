"""An expert's learnings and state files as memories of `expert:<name>` (issue 25 item 5):
an `expert chat` turn recalls an approved learning (never a rejected or manual one) and a
state file that holds more than its template; a session-scoped file reset for the chat is
not recalled; an operator's forget sticks across chats."""

from __future__ import annotations

from pathlib import Path

from clawtower.core.approvals import Approvals
from clawtower.core.experts import home
from clawtower.core.experts.chat import open_chat
from clawtower.core.experts.learning import propose
from clawtower.core.experts.package import load_package
from clawtower.core.memory.service import Memories
from clawtower.core.sessions.service import Sessions
from clawtower.core.store import open_store
from tests.helpers.session_helpers import runner

from .test_chat import NAME, bind_all, expert_home  # noqa: F401 (a fixture)

NS = f"expert:{NAME}"
BLOCK = "# Recalled memories"


async def test_an_expert_chat_recalls_its_approved_learning_and_state(
        expert_home: Path, tmp_path: Path) -> None:  # noqa: F811
    bind_all(tmp_path)
    pkg = load_package(home.package_dir(NAME))
    ws = home.workspace(NAME)
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        good = await propose(store, pkg, ws, scope="classify-ticket",
                             title="SSO lockouts are sev1", observation="A team locked out"
                             " after an SSO change was classified sev2",
                             correction="Classify SSO lockouts as account_access, sev1",
                             confidence="high")
        bad = await propose(store, pkg, ws, scope="package", title="Ignore SSO tickets",
                            observation="x", correction="Never answer SSO lockouts")
        await Approvals(store).approve(good["approval_id"], by="ada")
        await Approvals(store).reject(bad["approval_id"], by="ada")
        (ws / "state").mkdir(parents=True, exist_ok=True)
        queue = (pkg.root / "state" / "queue.md").read_text()
        (ws / "state" / "queue.md").write_text(queue + "\n- T-7 SSO lockout: sev1, watched\n")
        notes = (pkg.root / "state" / "shift-notes.md").read_text()
        (ws / "state" / "shift-notes.md").write_text(notes + "\n- SSO vendor call at 3pm\n")

        sid = await open_chat(store, NAME, by="tester")
        mem = Memories(store)
        keys = {r["key"]: r for r in await mem.listing(NS)}
        learning = next(k for k in keys if k.startswith("learning:classify-ticket:"))
        # the session-scoped file was reset for this chat: not a memory
        assert sorted(keys) == sorted([learning, "state:state/queue.md"])
        assert keys[learning]["category"] == "learning"
        # the files stay what they were
        assert "SSO lockouts are sev1" in (ws / "learnings" / "classify-ticket.md").read_text()

        sessions = Sessions(store)
        await sessions.send(sid, "How severe is an SSO lockout ticket?")
        r, rec = runner(store)
        try:
            assert await r.run_until_idle(120, {sid})
        finally:
            await r.aclose()
        system = rec.requests[-1].messages[0].content
        assert BLOCK in system
        assert "Classify SSO lockouts as account_access, sev1" in system
        assert "T-7 SSO lockout: sev1, watched" in system
        assert "Never answer SSO lockouts" not in system and "vendor call" not in system
        recalled = {x["key"] for x in (await sessions.get(sid))["jobs"][-1]["recalled"]}
        assert recalled == {learning, "state:state/queue.md"}

        # an operator forgets the learning: the next chat does not bring it back
        await mem.forget(NS, learning, by="alice", reason="superseded by the new matrix")
        await open_chat(store, NAME, by="tester")
        assert [r["key"] for r in await mem.listing(NS)] == ["state:state/queue.md"]
        stored = await store.fetchall("SELECT 1 FROM events WHERE type='memory.stored'")
        assert len(stored) == 2  # the second chat rewrote nothing unchanged
    finally:
        await store.close()
