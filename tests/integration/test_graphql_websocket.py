"""/graphql over a real websocket (uvicorn + graphql-transport-ws): authentication in
connection_init, and queries on a long-lived connection that never see stale data."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed

from app.settings import Settings
from tests.support.graphql import create_agent
from tests.support.servers import serve
from tests.support.ws import GraphQLWS


@pytest.fixture
async def ws_url(settings: Settings) -> AsyncIterator[str]:
    from app.main import create_app

    async with serve(create_app(settings), lifespan="on") as base_url:
        yield base_url.replace("http://", "ws://") + "/graphql"


async def test_token_in_connection_init_with_any_key_case(ws_url: str, workspace: Any) -> None:
    client = await GraphQLWS.connect(ws_url)
    try:
        await client.init({"AUTHORIZATION": f"Bearer {workspace.operator}"})  # acknowledged
        result = await client.execute("1", "{ viewer { role } }")
        assert result == {"data": {"viewer": {"role": "operator"}}}
    finally:
        await client.close()


@pytest.mark.parametrize("payload", [{}, {"Authorization": "Bearer evf_wrong"}, {"Authorization": 42}])
async def test_connection_without_a_valid_token_is_rejected(ws_url: str, payload: dict[str, Any]) -> None:
    client = await GraphQLWS.connect(ws_url)
    try:
        await client.send({"type": "connection_init", "payload": payload})
        with pytest.raises(ConnectionClosed) as closed:
            await client.receive()
    finally:
        await client.close()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403


async def test_each_operation_on_one_connection_reads_fresh_data(
    ws_url: str, gql: Any, workspace: Any
) -> None:
    agent = await create_agent(gql, workspace.admin, description="before")
    query = "query($id: ID!) { agent(id: $id) { description } }"
    client = await GraphQLWS.open(ws_url, workspace.viewer)
    try:
        first = await client.execute("1", query, {"id": agent["id"]})
        assert first["data"]["agent"]["description"] == "before"
        await gql.ok(
            'mutation($id: ID!) { updateAgent(id: $id, input: {description: "after"}) { id } }',
            {"id": agent["id"]},
            token=workspace.admin,
        )
        second = await client.execute("2", query, {"id": agent["id"]})
        assert second["data"]["agent"]["description"] == "after"
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("query", "variables"),
    [
        # Variable coercion and validation errors come from graphql-core without a code.
        ("subscription($root: ID!) { runTree(rootRunId: $root) { seq } }", {}),
        ("subscription($root: ID!) { runTree(rootRunId: $root) { seq } }", {"root": {"an": "object"}}),
        ("query($n: Int) { runs(first: $n) { edges { node { id } } } }", {"n": "x"}),
        ("subscription { nope }", {}),
    ],
)
async def test_every_websocket_error_carries_a_code(
    ws_url: str, workspace: Any, query: str, variables: dict[str, Any]
) -> None:
    client = await GraphQLWS.open(ws_url, workspace.viewer)
    try:
        await client.send(
            {"id": "1", "type": "subscribe", "payload": {"query": query, "variables": variables}}
        )
        errors = await client.errors("1")
        assert errors and all(e["extensions"]["code"] == "VALIDATION_FAILED" for e in errors), errors
        # The socket stays usable.
        assert await client.execute("2", "{ viewer { role } }") == {"data": {"viewer": {"role": "viewer"}}}
    finally:
        await client.close()


async def test_sockets_that_never_send_connection_init_are_closed_on_time(settings: Settings) -> None:
    """50 sockets that connect and say nothing (300 of them were once held for a minute):
    each is closed with 4408 once ENVERIF_WS_CONNECTION_INIT_TIMEOUT_S has passed."""
    from app.main import create_app

    app = create_app(
        settings.model_copy(
            update={"ws_connection_init_timeout_s": 1.0, "ws_max_pending_sockets_per_address": 100}
        )
    )
    async with serve(app, lifespan="on") as base_url:
        url = base_url.replace("http://", "ws://") + "/graphql"
        started = time.monotonic()
        clients = [await GraphQLWS.connect(url) for _ in range(50)]

        async def closed_with(client: GraphQLWS) -> int | None:
            with pytest.raises(ConnectionClosed) as closed:
                await client.receive(timeout_s=10)
            return closed.value.rcvd.code if closed.value.rcvd else None

        codes = await asyncio.gather(*(closed_with(c) for c in clients))
        elapsed = time.monotonic() - started
    assert codes == [4408] * 50
    assert 1.0 <= elapsed < 6.0, elapsed
