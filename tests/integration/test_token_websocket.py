"""A websocket whose token dies: a real uvicorn, a real graphql-transport-ws client, the real
database and Redis (docs/operating/security.md).

The token is revoked through a *different* app instance (the ``gql`` fixture's in-process
app, with its own engine and Redis pool) than the uvicorn serving the websocket: like a
revocation arriving at another API process, the socket's process learns of it only from the
database.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from starlette.applications import Starlette
from websockets.exceptions import ConnectionClosed

from app.clock import utcnow
from app.services import event_log
from app.services.runtime import Runtime
from app.settings import Settings
from tests.conftest import WorkspaceFixture
from tests.integration.test_graphql_tokens import REVOKE, create
from tests.support.events import append, gid, new_root_run
from tests.support.servers import serve
from tests.support.ws import GraphQLWS, bearer

# An open websocket of a revoked token is closed within seconds (docs/operating/security.md): 5 s.
CLOSE_WITHIN_S = 5.0

Server = Callable[..., AbstractAsyncContextManager[tuple[Starlette, str]]]


@pytest.fixture
def server(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Server:
    """Starts ``create_app`` under uvicorn, optionally with another re-check interval;
    yields the app and its websocket URL."""
    from app.main import create_app

    # The subscription's safety-net poll must not be what delivers (or hides) anything here.
    monkeypatch.setattr(event_log, "IDLE_POLL_S", 30.0)

    @asynccontextmanager
    async def _serve(**overrides: Any) -> AsyncIterator[tuple[Starlette, str]]:
        app = create_app(settings.model_copy(update=overrides))
        async with serve(app, lifespan="on") as base_url:
            yield app, base_url.replace("http://", "ws://") + "/graphql"

    return _serve


@asynccontextmanager
async def socket(url: str, token: str) -> AsyncIterator[GraphQLWS]:
    client = await GraphQLWS.open(url, token)
    try:
        yield client
    finally:
        await client.close()


async def closed_within(client: GraphQLWS, timeout_s: float) -> tuple[int, str, float, list[dict[str, Any]]]:
    """Read until the server closes the socket: (code, reason, seconds taken, messages read)."""
    started = time.monotonic()
    messages: list[dict[str, Any]] = []
    try:
        while True:
            remaining = timeout_s - (time.monotonic() - started)
            if remaining <= 0:
                pytest.fail(f"socket still open after {timeout_s}s; got {messages}")
            messages.append(await client.receive(remaining))
    except ConnectionClosed as closed:
        assert closed.rcvd is not None, "the client closed, not the server"
        return closed.rcvd.code, closed.rcvd.reason, time.monotonic() - started, messages
    except TimeoutError:
        pytest.fail(f"socket still open after {timeout_s}s; got {messages}")


async def test_revoking_closes_an_open_run_tree_subscription_within_seconds(
    server: Server, gql: Any, runtime: Runtime, workspace: WorkspaceFixture
) -> None:
    created = await create(gql, workspace.admin, role="viewer")
    run = await new_root_run(runtime, workspace)
    async with server() as (app, url), socket(url, created["token"]) as client:
        await client.subscribe("watch", gid(run))
        assert [e["seq"] for e in await client.events("watch", 1)] == [1]
        await append(runtime, run.id)  # live events flow while the token is good
        assert [e["seq"] for e in await client.events("watch", 1)] == [2]
        assert app.state.event_hub.subscription_count == 1

        await gql.ok(REVOKE, {"id": created["apiToken"]["id"]}, token=workspace.admin)
        await append(runtime, run.id)
        code, reason, took_s, messages = await closed_within(client, CLOSE_WITHIN_S)

        assert code == 4403 and "revoked" in reason
        assert took_s < CLOSE_WITHIN_S
        # The operation is told why before the close frame (issue 27 item 11).
        (refusal,) = [m for m in messages if m.get("type") == "error"]
        assert refusal["id"] == "watch" and messages[-1] is refusal
        assert refusal["payload"][0]["extensions"] == {"code": "UNAUTHENTICATED"}
        # The subscription is gone on the server too: no more events are produced for it.
        assert app.state.event_hub.subscription_count == 0


async def test_a_new_operation_on_a_revoked_tokens_socket_is_refused_at_once(
    server: Server, gql: Any, runtime: Runtime, workspace: WorkspaceFixture
) -> None:
    created = await create(gql, workspace.admin, role="viewer")
    run = await new_root_run(runtime, workspace)
    # The timer re-checks only every 4 s: a refusal faster than that is the per-operation check.
    async with server(ws_token_recheck_s=4.0) as (_, url), socket(url, created["token"]) as client:
        await gql.ok(REVOKE, {"id": created["apiToken"]["id"]}, token=workspace.admin)
        await client.subscribe("late", gid(run))
        code, reason, took_s, messages = await closed_within(client, 2.0)
    assert code == 4403 and "revoked" in reason
    assert took_s < 2.0
    assert not [m for m in messages if m.get("type") == "next"], messages
    assert [(m["id"], m["type"], m["payload"][0]["extensions"]["code"]) for m in messages] == [
        ("late", "error", "UNAUTHENTICATED")
    ]


async def test_a_socket_closes_when_its_token_expires(
    server: Server, gql: Any, runtime: Runtime, workspace: WorkspaceFixture
) -> None:
    expires = utcnow() + timedelta(seconds=2)
    created = await create(gql, workspace.admin, expiresAt=expires.isoformat())
    run = await new_root_run(runtime, workspace)
    async with server(ws_token_recheck_s=4.0) as (_, url), socket(url, created["token"]) as client:
        await client.subscribe("watch", gid(run))
        assert [e["seq"] for e in await client.events("watch", 1)] == [1]
        code, reason, _, _ = await closed_within(client, 6.0)
        closed_at = utcnow()
    assert code == 4403 and "expired" in reason
    # On a timer to expiresAt itself, not at the next 4-second re-check.
    assert expires <= closed_at < expires + timedelta(seconds=1.5)


async def test_a_revoked_token_cannot_open_a_socket(
    server: Server, gql: Any, workspace: WorkspaceFixture
) -> None:
    created = await create(gql, workspace.admin)
    await gql.ok(REVOKE, {"id": created["apiToken"]["id"]}, token=workspace.admin)
    async with server() as (_, url):
        client = await GraphQLWS.connect(url)
        await client.send({"type": "connection_init", "payload": bearer(created["token"])})
        code, _, _, messages = await closed_within(client, 5.0)
        await client.close()
    assert code == 4403 and messages == []
