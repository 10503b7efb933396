"""/graphql over a real websocket (uvicorn + graphql-transport-ws): authentication in
connection_init, and queries on a long-lived connection that never see stale data."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from app.settings import Settings
from tests.integration.graphql_support import create_agent
from tests.support.servers import serve

PROTOCOL = "graphql-transport-ws"


@pytest.fixture
async def ws_url(settings: Settings) -> AsyncIterator[str]:
    from app.main import create_app

    async with serve(create_app(settings), lifespan="on") as base_url:
        yield base_url.replace("http://", "ws://") + "/graphql"


async def _recv(ws: ClientConnection) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 10))
    return message


async def _init(ws: ClientConnection, payload: dict[str, Any]) -> dict[str, Any]:
    await ws.send(json.dumps({"type": "connection_init", "payload": payload}))
    return await _recv(ws)


async def _execute(ws: ClientConnection, op_id: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    await ws.send(
        json.dumps({"id": op_id, "type": "subscribe", "payload": {"query": query, "variables": variables}})
    )
    result = await _recv(ws)
    assert result["type"] == "next", result
    assert (await _recv(ws))["type"] == "complete"
    payload: dict[str, Any] = result["payload"]
    return payload


async def test_token_in_connection_init_with_any_key_case(ws_url: str, workspace: Any) -> None:
    async with connect(ws_url, subprotocols=[PROTOCOL]) as ws:  # type: ignore[list-item]
        assert (await _init(ws, {"AUTHORIZATION": f"Bearer {workspace.operator}"}))[
            "type"
        ] == "connection_ack"
        result = await _execute(ws, "1", "{ viewer { role } }", {})
        assert result == {"data": {"viewer": {"role": "operator"}}}


@pytest.mark.parametrize("payload", [{}, {"Authorization": "Bearer evf_wrong"}, {"Authorization": 42}])
async def test_connection_without_a_valid_token_is_rejected(ws_url: str, payload: dict[str, Any]) -> None:
    async with connect(ws_url, subprotocols=[PROTOCOL]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"type": "connection_init", "payload": payload}))
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403


async def test_each_operation_on_one_connection_reads_fresh_data(
    ws_url: str, gql: Any, workspace: Any
) -> None:
    agent = await create_agent(gql, workspace.admin, description="before")
    query = "query($id: ID!) { agent(id: $id) { description } }"
    async with connect(ws_url, subprotocols=[PROTOCOL]) as ws:  # type: ignore[list-item]
        await _init(ws, {"Authorization": f"Bearer {workspace.viewer}"})
        first = await _execute(ws, "1", query, {"id": agent["id"]})
        assert first["data"]["agent"]["description"] == "before"
        await gql.ok(
            'mutation($id: ID!) { updateAgent(id: $id, input: {description: "after"}) { id } }',
            {"id": agent["id"]},
            token=workspace.admin,
        )
        second = await _execute(ws, "2", query, {"id": agent["id"]})
        assert second["data"]["agent"]["description"] == "after"
