"""The webhook app under hostile input (in process, through httpx's ASGI transport: the same
starlette app `clawtower serve` mounts): random bodies and headers never give a 500, and
nothing is stored unless the answer is 202. Also: an inactive trigger answers 409, and a
store that cannot write answers 503."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clawtower.core.experts import home
from clawtower.core.store import open_store
from clawtower.core.triggers import hookauth
from clawtower.core.triggers.catalog import Catalog
from clawtower.core.triggers.ratelimit import FailureLimiter
from clawtower.core.triggers.webhook import build_app
from tests.helpers.hook_expert import SECRET, TOKEN, install_hook_expert

BODIES = st.one_of(
    st.binary(max_size=3000),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                 lambda kids: st.lists(kids, max_size=4)
                 | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                 max_leaves=20).map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"event_id": st.text(max_size=30) | st.integers(),
                           "contact_id": st.text(max_size=30) | st.none()}).map(
        lambda v: json.dumps(v).encode()))
HEADERS = st.dictionaries(
    st.sampled_from(["authorization", "x-hub-signature-256", "x-clawtower-timestamp",
                     "content-type", "content-length"]),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60),
    max_size=4)


def test_hostile_requests_never_give_a_500_nor_store_a_refusal(
        tmp_path: Path, hook_home: Path) -> None:
    hookauth.write("hook-expert", "inbound", max_bytes=2048)
    db = str(tmp_path / "f.db")

    async def prep() -> Any:
        return await open_store(db)

    loop = asyncio.new_event_loop()
    store = loop.run_until_complete(prep())
    app = build_app(store, Catalog(), limiter=FailureLimiter(10**6))  # 429s: elsewhere
    codes: dict[int, int] = {}

    async def one(body: bytes, headers: dict[str, str], good_auth: int) -> None:
        h = dict(headers)
        h.pop("content-length", None)  # httpx sets the real one
        if good_auth == 1:
            h["authorization"] = f"Bearer {TOKEN}"
        elif good_auth == 2:
            h[hookauth.TIMESTAMP_HEADER] = str(int(__import__("time").time()))
            h[hookauth.SIGNATURE_HEADER] = hookauth.sign(SECRET, h[hookauth.TIMESTAMP_HEADER],
                                                         body)
        before = await store.fetchone("SELECT count(*) AS n FROM trigger_items")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as c:
            r = await c.post("/hooks/hook-expert/inbound", content=body, headers=h)
        after = await store.fetchone("SELECT count(*) AS n FROM trigger_items")
        assert r.status_code in (202, 401, 404, 413, 422), (r.status_code, r.text)
        assert "error" in r.json() or r.status_code == 202
        assert before is not None and after is not None
        assert after["n"] - before["n"] == (1 if r.status_code == 202 else 0)
        codes[r.status_code] = codes.get(r.status_code, 0) + 1

    @settings(max_examples=150, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(body=BODIES, headers=HEADERS, good_auth=st.sampled_from([0, 1, 2]))
    def run(body: bytes, headers: dict[str, str], good_auth: int) -> None:
        loop.run_until_complete(one(body, headers, good_auth))

    try:
        run()
    finally:
        loop.run_until_complete(store.close())
        loop.close()
    assert codes.get(401) and codes.get(422)  # the strategies reach the refusals


async def test_inactive_trigger_409_and_unwritable_store_503(
        tmp_path: Path, hook_home: Path) -> None:
    home.remove("hook-expert")
    install_hook_expert(tmp_path / "tool", extra="requires:\n  tools: [feed]\n",
                        triggers="""  - name: inbound
    type: webhook
    requires_tool: feed
    concurrency: parallel
    process: note
""")
    hookauth.write("hook-expert", "inbound", token=TOKEN)
    store = await open_store(str(tmp_path / "i.db"))
    app = build_app(store, Catalog())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as c:
        r = await c.post("/hooks/hook-expert/inbound", json={},
                         headers={"authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 409 and "requires_tool 'feed' is not bound" in r.json()["error"]
        from clawtower.core.experts.bindings import write_binding

        write_binding("hook-expert", "feed", {"type": "mcp", "command": "true"})
        app = build_app(store, Catalog())
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as c2:
            r = await c2.post("/hooks/hook-expert/inbound", json={},
                              headers={"authorization": f"Bearer {TOKEN}"})
            assert r.status_code == 202
            await store.close()  # a store that cannot take the write
            r = await c2.post("/hooks/hook-expert/inbound", json={},
                              headers={"authorization": f"Bearer {TOKEN}"})
            assert r.status_code == 503 and "not stored" in r.json()["error"]
