"""``approvalEvents`` through the reference JavaScript client: npm ``graphql-ws`` driven by
node (tests/js/watch_approvals.mjs) against a real uvicorn and a real worker. The inbox sees
its workspace's approvals requested, decided and expired, within a second, and nothing of
another workspace's."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest

from app.main import create_app
from app.settings import Settings
from tests.support.js import ensure_js_packages
from tests.support.live import http_gql
from tests.support.runs import scripted_agent, start_run
from tests.support.servers import serve, sink_server
from tests.support.ws import ws_url

NODE_TIMEOUT_S = 60
DECIDE = "mutation($id: ID!) { decideApproval(id: $id, decision: APPROVE) { id status } }"


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[tuple[str, Any]]:
    app = create_app(settings)
    async with serve(app, lifespan="on") as base_url:
        yield base_url, app


async def _hook_agent(gql: Any, admin: str, url: str, **agent: Any) -> str:
    steps = [
        {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {}}},
        {"final": "{{ results }}"},
    ]
    return await scripted_agent(gql, admin, steps=steps, **agent)


async def _subscribed(app: Any) -> None:
    """Until the node client's subscription is in place in the server's event hub."""
    for _ in range(1_000):
        if app.state.event_hub.subscription_count >= 1:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("approvalEvents never subscribed")


async def test_the_inbox_receives_requested_decided_and_expired_within_a_second(
    api: tuple[str, Any], settings: Settings, workspace: Any, make_workspace: Any, worker: Any
) -> None:
    base_url, app = api
    js = ensure_js_packages()
    gql = http_gql(base_url)
    other = await make_workspace()
    node = await asyncio.create_subprocess_exec(
        "node", str(js / "watch_approvals.mjs"), ws_url(base_url), "4",
        env={**os.environ, "ENVERIF_TOKEN": workspace.viewer},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert node.stdout is not None
    events: list[dict[str, Any]] = []
    async with sink_server() as (_sink, url), asyncio.timeout(NODE_TIMEOUT_S):
        assert json.loads(await node.stdout.readline()) == {"ready": True}
        await _subscribed(app)
        # Another workspace's approval never reaches this inbox.
        await start_run(gql, other.operator, await _hook_agent(gql, other.admin, url))
        first = await start_run(gql, workspace.operator, await _hook_agent(gql, workspace.admin, url))
        expiring_agent = await _hook_agent(
            gql, workspace.admin, url,
            policy={"rules": [{"tool": "webhook.post", "decision": "REQUIRE_APPROVAL", "timeoutS": 1}]},
        )  # fmt: skip
        expiring = None
        while raw := await node.stdout.readline():
            line = json.loads(raw)
            assert "error" not in line, line
            event = line["event"]
            event["receivedAt"] = line["receivedAt"]
            events.append(event)
            if event["type"] == "REQUESTED" and event["approval"]["run"]["id"] == first:
                await gql.ok(DECIDE, {"id": event["approval"]["id"]}, token=workspace.operator)
            if event["type"] == "DECIDED":
                expiring = await start_run(gql, workspace.operator, expiring_agent)
        _, stderr = await node.communicate()
    assert node.returncode == 0, (events, stderr.decode())
    kinds = [(e["type"], e["approval"]["run"]["id"]) for e in events]
    assert kinds == [("REQUESTED", first), ("DECIDED", first), ("REQUESTED", expiring), ("EXPIRED", expiring)]
    assert events[1]["approval"]["decision"] == "APPROVE"
    assert events[3]["approval"]["status"] == "EXPIRED"
    # Live: each requested approval reached the client within a second of being requested.
    for event in (events[0], events[2]):
        lag_s = event["receivedAt"] / 1000 - datetime.fromisoformat(event["at"]).timestamp()
        assert lag_s < 1.0, (lag_s, event)


async def test_a_viewer_token_is_enough_and_no_token_is_refused(api: tuple[str, Any]) -> None:
    base_url, _ = api
    js = ensure_js_packages()
    node = await asyncio.create_subprocess_exec(
        "node", str(js / "watch_approvals.mjs"), ws_url(base_url), "1",
        env={**os.environ, "ENVERIF_TOKEN": "not-a-token"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    started = time.monotonic()
    stdout, _ = await asyncio.wait_for(node.communicate(), NODE_TIMEOUT_S)
    assert node.returncode == 1 and time.monotonic() - started < NODE_TIMEOUT_S
    assert "error" in json.loads(stdout.splitlines()[-1])


async def test_each_event_reads_the_approvals_notifications_as_they_are_then(
    api: tuple[str, Any], workspace: Any, worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A websocket's context lives as long as the connection, its DataLoaders only as long as
    one event: the DECIDED event shows the delivery that was still under way at REQUESTED."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from tests.integration.test_approval_webhooks import SECRET, SECRET_ENV, SET_HOOK
    from tests.support.ws import GraphQLWS

    monkeypatch.setenv(SECRET_ENV, SECRET)
    base_url, app = api
    gql = http_gql(base_url)
    answer = asyncio.Event()  # the receiver holds its answer until the first event was read

    async def hook(request: Request) -> Response:
        await answer.wait()
        return Response(status_code=204)

    async with serve(Starlette(routes=[Route("/hook", hook, methods=["POST"])])) as hook_url:
        await gql.ok(SET_HOOK, {"url": hook_url + "/hook", "secretEnv": SECRET_ENV}, token=workspace.admin)
        ws = await GraphQLWS.open(ws_url(base_url), workspace.viewer)
        query = "subscription { approvalEvents { type approval { id notifications { status attempts } } } }"
        await ws.send({"id": "a", "type": "subscribe", "payload": {"query": query}})
        await _subscribed(app)
        await start_run(gql, workspace.operator, await _hook_agent(gql, workspace.admin, hook_url))
        [requested] = await ws.events("a", 1, field="approvalEvents")
        assert requested["type"] == "REQUESTED"
        assert requested["approval"]["notifications"] == [{"status": "PENDING", "attempts": 0}]
        answer.set()
        note = "query($id: ID!) { node(id: $id) { ... on Approval { notifications { status } } } }"
        approval_id = requested["approval"]["id"]
        for _ in range(300):
            data = await gql.ok(note, {"id": approval_id}, token=workspace.viewer)
            if data["node"]["notifications"] == [{"status": "DELIVERED"}]:
                break
            await asyncio.sleep(0.05)
        await gql.ok(DECIDE, {"id": approval_id}, token=workspace.operator)
        [decided] = await ws.events("a", 1, field="approvalEvents")
        await ws.close()
    assert decided["type"] == "DECIDED"
    assert decided["approval"]["notifications"] == [{"status": "DELIVERED", "attempts": 1}]
