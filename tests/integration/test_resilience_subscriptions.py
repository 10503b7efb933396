"""A ``runTree`` subscription while the database does not answer: the client is told
``UNAVAILABLE`` (retry, resubscribing with ``afterSeq``), never ``INTERNAL``."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator

import pytest

from app.graphql.ids import to_global_id
from app.settings import Settings
from tests.conftest import WorkspaceFixture
from tests.support.servers import serve
from tests.support.ws import GraphQLWS, bearer


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def server_without_database(settings: Settings) -> AsyncIterator[str]:
    from app.main import create_app

    down = Settings(
        **{**settings.model_dump(), "database_url": f"mysql+asyncmy://root@127.0.0.1:{closed_port()}/enverif"}
    )
    async with serve(create_app(down), lifespan="on") as base_url:
        yield base_url.replace("http://", "ws://") + "/graphql"


async def test_subscription_without_a_database_is_unavailable(
    server_without_database: str, workspace: WorkspaceFixture
) -> None:
    client = await GraphQLWS.connect(server_without_database)
    try:
        await client.send({"type": "connection_init", "payload": bearer(workspace.viewer)})
        # The token cannot be checked now; the socket is kept, and the operation answers.
        assert await client.receive() == {"type": "connection_ack"}
        await client.subscribe("1", to_global_id("Run", 1))
        errors = await client.errors("1")
        assert [e["extensions"]["code"] for e in errors] == ["UNAVAILABLE"], json.dumps(errors)
        assert errors[0]["extensions"]["retryAfter"] >= 1
    finally:
        await client.close()
