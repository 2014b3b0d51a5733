"""ACP in the console: a coding harness's permission request waits in mode 2 with the tool
call and the harness's options, and `A` answers it "always" (a rule, in the store); in mode 4
the session's Harness pane shows its tool calls, plan, diff and the waiting request."""

from __future__ import annotations

from pathlib import Path

from tui_helpers import SIZE, shown, until

from clawtower.core import open_store
from clawtower.core.acp.events import AcpText, AcpToolCall
from clawtower.core.approvals import Approvals
from clawtower.core.demo.acp import APPROVAL_ID, RUN_ID, seed_acp
from clawtower.core.events import NewEvent
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.views import ApprovalList


async def seeded(tmp_path: Path) -> tuple[str, str]:
    db = str(tmp_path / "c.db")
    store = await open_store(db)
    try:
        sid = await seed_acp(store)
    finally:
        await store.close()
    return db, sid


async def test_mode_2_always_allow(tmp_path: Path) -> None:
    db, _ = await seeded(tmp_path)
    app = ClawtowerApp(db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("2")
        lst = app.screen.query_one(ApprovalList)
        await until(pilot, lambda: lst.move_cursor_to_key(APPROVAL_ID))
        await pilot.pause()
        body = shown(app.screen.query_one("#approval-body"))
        assert "zed-example asks to edit" in body and "/srv/acme-shop/config.json" in body
        assert "Allow this change [allow_once]" in body and "always allow" in body
        await pilot.press("A")
        await until(pilot, lambda: app.model.approval(APPROVAL_ID) is None, timeout=20)
    store = await open_store(db)
    try:
        perm = await store.fetchone("SELECT * FROM acp_permissions WHERE approval_id=?",
                                    (APPROVAL_ID,))
        rules = await store.fetchall("SELECT * FROM acp_rules WHERE active=1")
    finally:
        await store.close()
    assert perm is not None
    assert (perm["option_id"], perm["answered_by"], perm["rule_id"]) == (
        "allow", "alice", rules[0]["id"])
    assert (rules[0]["harness"], rules[0]["tool_kind"]) == ("zed-example", "edit")


async def test_mode_4_shows_the_harness_pane(tmp_path: Path) -> None:
    db, sid = await seeded(tmp_path)
    app = ClawtowerApp(db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("4")
        await until(pilot, lambda: (getattr(app.screen, "detail", None) or {}).get("id")
                    == sid, timeout=20)
        await pilot.pause()
        pane = shown(app.screen.query_one("#ses-acp"))
        assert "edit: Modifying critical configuration file" in pane
        assert "diff /srv/acme-shop/config.json" in pane and '"timeout_s": 30' in pane
        assert "plan [in_progress]" in pane and f"waiting in mode 2 ({APPROVAL_ID})" in pane
        assert "Let me start by reading some files" in pane  # the running turn's text
        # another process answers and the harness goes on: the pane follows, live
        other = await open_store(db)
        try:
            await Approvals(other).approve(APPROVAL_ID, by="bob")
            await other.append([NewEvent(
                entity_id=RUN_ID, actor="acp:zed-example", role="agent",
                payload=AcpToolCall(call_id="call_2", status="completed"))])
            await other.append([NewEvent(
                entity_id=RUN_ID, actor="acp:zed-example", role="agent",
                payload=AcpText(text=" Configuration updated."))])
        finally:
            await other.close()

        def updated() -> bool:
            text = shown(app.screen.query_one("#ses-acp"))
            return ("completed edit: Modifying" in text and "-> allow by bob" in text
                    and "Configuration updated." in text)

        await until(pilot, updated, timeout=20)
