"""Issue 22 item 4: a 202 means it will run. What a process run cannot take (a NUL in a
string, inputs over MAX_PROCESS_INPUT_BYTES) is refused at intake with 422 naming the field,
and stores nothing; an input just under the limit is accepted and its run ends ok (before,
a 200,000-character string was queued and escalated with `Argument list too long`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawtower.core.errors import ValidationError
from clawtower.core.experts import home
from clawtower.core.experts.run import run_process
from clawtower.core.limits import MAX_PROCESS_INPUT_BYTES
from clawtower.core.store.interface import Store
from clawtower.core.triggers import hookauth
from clawtower.core.triggers.catalog import Catalog
from clawtower.core.triggers.webhook import build_app
from tests.helpers.hook_expert import TOKEN, install_hook_expert

HOOK = "/hooks/hook-expert/inbound"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


TRIGGER = """  - name: inbound
    type: webhook
    dedupe_key: event_id
    payload_mapping:
      contact_id: contact_id
      body: message.body
    process: note
"""


@pytest.mark.both_backends
async def test_webhook_refuses_what_a_run_cannot_take_with_422_naming_the_field(
        hook_home: Path, tmp_path: Path, store: Store) -> None:
    home.remove("hook-expert")
    install_hook_expert(tmp_path / "b", triggers=TRIGGER,
                        proc_extra="  - name: body\n    type: string\n")
    hookauth.write("hook-expert", "inbound", max_bytes=1 << 20)
    app = build_app(store, Catalog())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        async def post(body: dict[str, Any]) -> httpx.Response:
            return await c.post(HOOK, content=json.dumps(body).encode(), headers=BEARER)

        r = await post({"event_id": "e-1", "contact_id": "a\x00b"})
        assert r.status_code == 422, r.text
        assert "payload.contact_id (input contact_id): contains a NUL" in r.json()["error"]
        r = await post({"event_id": "e-2", "contact_id": "c",  # under max_bytes
                        "message": {"body": "x" * 200_000}})
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert "payload.message.body (input body): 200002 bytes" in err
        assert f"at most {MAX_PROCESS_INPUT_BYTES} bytes" in err
        r = await post({"event_id": "e-3", "contact_id": "ok", "other": "a\x00" * 10})
        assert r.status_code == 202  # a field no input takes is not the run's concern
    items = await store.fetchall("SELECT id FROM trigger_items")
    assert len(items) == 1  # the refusals stored nothing


async def test_inputs_under_the_limit_run_and_over_it_are_refused_before_starting(
        hook_home: Path, store: Store) -> None:
    near = "y" * (MAX_PROCESS_INPUT_BYTES - 100)
    env = await run_process(store, "hook-expert", "note", {"contact_id": near}, by="test")
    assert env["ok"] and env["status"] == "ok", env
    with pytest.raises(ValidationError, match=r"inputs\.contact_id: 200002 bytes"):
        await run_process(store, "hook-expert", "note", {"contact_id": "z" * 200_000},
                          by="test")
    runs = await store.fetchall("SELECT status FROM workflow_runs")
    assert [r["status"] for r in runs] == ["ok"]  # the refused one never started
