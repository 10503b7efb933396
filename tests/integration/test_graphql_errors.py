"""Authentication, error presentation, request limits, and the HTTP surface around /graphql."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from app.db import orm
from app.services import auth, reads
from tests.support.graphql import CREATE_AGENT, create_agent


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer evf_not-a-real-token"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer"},
    ],
)
async def test_missing_or_bad_token_is_unauthenticated(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    for query in [
        "{ viewer { role } }",
        "{ agents { edges { node { id } } } }",
        'mutation { deleteMemory(id: "x") }',
    ]:
        response = await client.post("/graphql", json={"query": query}, headers=headers)
        assert response.status_code == 200
        body = response.json()
        assert body["data"] is None
        assert {e["extensions"]["code"] for e in body["errors"]} == {"UNAUTHENTICATED"}


async def test_several_fields_without_a_token_each_say_unauthenticated(gql: Any) -> None:
    body = await gql.raw('{ agent(id: "a") { id } run(id: "b") { id } }', token=None)
    assert body["data"] == {"agent": None, "run": None}
    assert [e["extensions"]["code"] for e in body["errors"]] == ["UNAUTHENTICATED", "UNAUTHENTICATED"]


async def test_revoked_token_is_unauthenticated(
    gql: Any, app: Any, workspace: Any, sessionmaker: Any
) -> None:
    await gql.ok("{ viewer { role } }", token=workspace.viewer)
    async with sessionmaker() as session, session.begin():
        row = await session.scalar(
            select(orm.ApiToken).where(orm.ApiToken.token_hash == auth.hash_token(workspace.viewer))
        )
        row.revoked_at = row.created_at
    # What every way of revoking does after its commit: API processes drop their cached copy.
    await auth.announce_revocation(app.state.runtime, row.id)
    error = await gql.error("{ viewer { role } }", token=workspace.viewer)
    assert error["extensions"]["code"] == "UNAUTHENTICATED"


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
async def test_viewer_reports_workspace_and_role(gql: Any, workspace: Any, role: str) -> None:
    data = await gql.ok("{ viewer { role workspace { id name } } }", token=workspace.token(role))
    assert data["viewer"]["role"] == role
    assert data["viewer"]["workspace"]["name"] == workspace.name
    node = await gql.ok(
        "query($id: ID!) { node(id: $id) { ... on Workspace { name } } }",
        {"id": data["viewer"]["workspace"]["id"]},
        token=workspace.token(role),
    )
    assert node["node"] == {"name": workspace.name}


async def test_unexpected_errors_are_masked_and_logged(
    gql: Any, workspace: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def explode(*_: Any, **__: Any) -> Any:
        raise OperationalError(
            "SELECT token_hash FROM api_tokens WHERE 1", {"p": "hunter2"}, Exception("gone away")
        )

    monkeypatch.setattr(reads, "fetch_page", explode)
    agent = await create_agent(gql, workspace.admin)
    with caplog.at_level(logging.ERROR, logger="app.graphql.errors"):
        body = await gql.raw(
            "query($id: ID!) { agent(id: $id) { name } agents { edges { cursor } } }",
            {"id": agent["id"]},
            token=workspace.viewer,
        )
    # agents is non-null, so its failure nulls the whole response: GraphQL's rule.
    assert body["data"] is None
    assert body["errors"] == [
        {
            "message": "Internal server error",
            "locations": [{"line": 1, "column": 43}],
            "path": ["agents"],
            "extensions": {"code": "INTERNAL"},
        }
    ]
    text = json.dumps(body)
    for leak in ("SELECT", "api_tokens", "hunter2", "gone away", "Traceback", "OperationalError"):
        assert leak not in text
    # ...but the operator can find out what happened.
    logged = [r for r in caplog.records if r.name == "app.graphql.errors"]
    assert len(logged) == 1
    assert logged[0].exc_info is not None and isinstance(logged[0].exc_info[1], OperationalError)


async def test_expected_errors_are_not_logged_as_errors(
    gql: Any, workspace: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        await gql.error('{ agent(id: "nope") { id } }', token=workspace.viewer)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_syntax_and_validation_errors_come_from_graphql_core(gql: Any, workspace: Any) -> None:
    body = await gql.raw("{ agents { edges ", token=workspace.viewer)
    assert body["errors"][0]["message"].startswith("Syntax Error")
    body = await gql.raw("{ agents { nope } }", token=workspace.viewer)
    assert "Cannot query field 'nope'" in body["errors"][0]["message"]
    body = await gql.raw(
        CREATE_AGENT, {"input": {"name": "x", "model": {}, "status": "SLEEPY"}}, token=workspace.admin
    )
    assert "SLEEPY" in body["errors"][0]["message"]


async def test_query_depth_is_limited(gql: Any, workspace: Any) -> None:
    deep = "children { " * 12 + "id" + " }" * 12
    body = await gql.raw(f'{{ run(id: "x") {{ {deep} }} }}', token=workspace.viewer)
    assert "data" not in body  # a request error
    assert "exceeds maximum operation depth" in body["errors"][0]["message"]


async def test_aliases_are_limited(gql: Any, workspace: Any) -> None:
    many = " ".join(f"a{i}: viewer {{ role }}" for i in range(60))
    body = await gql.raw(f"{{ {many} }}", token=workspace.viewer)
    assert "data" not in body  # a request error
    assert "aliases" in body["errors"][0]["message"]


async def test_queries_over_get_are_served(client: httpx.AsyncClient, workspace: Any) -> None:
    # Mutations over GET stay refused (test_http_edge.py); queries are served, for clients'
    # useGETForQueries (docs/graphql/frontends.md).
    response = await client.get(
        "/graphql",
        params={"query": "{ viewer { role } }"},
        headers={"Authorization": f"Bearer {workspace.viewer}"},
    )
    assert response.status_code == 200
    assert response.json() == {"data": {"viewer": {"role": "viewer"}}}


async def test_graphiql_only_when_asked_for(client: httpx.AsyncClient, settings: Any) -> None:
    from app.main import create_app

    response = await client.get("/graphql", headers={"Accept": "text/html"})
    assert "graphiql" not in response.text.lower()
    for flags in ({"graphiql": True}, {"dev_mode": True}):
        ide_app = create_app(settings.model_copy(update=flags))
        async with (
            ide_app.router.lifespan_context(ide_app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=ide_app), base_url="http://127.0.0.1") as ide,
        ):
            page = await ide.get("/graphql", headers={"Accept": "text/html"})
        assert page.status_code == 200
        assert "graphiql" in page.text.lower()


async def test_healthz_ok(client: httpx.AsyncClient, worker: Any) -> None:
    deadline = time.monotonic() + 10
    while True:
        response = await client.get("/healthz")
        if response.status_code == 200 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)  # until the worker's first heartbeat
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["workers"] >= 1
    assert {k: body[k] for k in ("status", "database", "redis")} == {
        "status": "ok",
        "database": "ok",
        "redis": "ok",
    }


async def test_healthz_degraded_when_redis_fails(
    client: httpx.AsyncClient, app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    async def down() -> None:
        raise RedisConnectionError("Error 111 connecting to secret-host:6379")

    monkeypatch.setattr(app.state.runtime.redis, "ping", down)
    response = await client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded"
    assert body["database"] == "ok"
    assert body["redis"].startswith("error")
    assert "secret-host" not in response.text
