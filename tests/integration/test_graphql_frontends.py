"""What a frontend on another origin meets at /graphql (docs/graphql/frontends.md): CORS
preflights, the spec's request errors, and null-versus-NOT_FOUND for ids.

Through the real app over HTTP (httpx's ASGI transport), and a real uvicorn for websocket
handshakes (browsers send ``Origin`` there too, and CORS does not apply to them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus

from app.main import create_app
from app.settings import Settings, load_settings
from tests.support.graphql import create_agent, gid
from tests.support.servers import serve
from tests.support.ws import PROTOCOL, GraphQLWS, ws_url

ALLOWED = "http://localhost:5173"
REFUSED = "http://localhost:6666"
PREFLIGHT = {
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization,content-type",
}


@pytest.fixture
async def cors_app(settings: Settings) -> AsyncIterator[Any]:
    app = create_app(settings.model_copy(update={"cors_origins": (ALLOWED,)}))
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def cors_client(cors_app: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=cors_app), base_url="http://enverif.test"
    ) as c:
        yield c


# -- CORS ------------------------------------------------------------------------------------


async def test_a_preflight_from_an_allowed_origin_is_answered(cors_client: httpx.AsyncClient) -> None:
    response = await cors_client.options("/graphql", headers={"Origin": ALLOWED, **PREFLIGHT})
    assert response.status_code == 200, response.text
    assert response.headers["access-control-allow-origin"] == ALLOWED
    assert "POST" in response.headers["access-control-allow-methods"]
    allowed_headers = response.headers["access-control-allow-headers"].lower()
    assert "authorization" in allowed_headers and "content-type" in allowed_headers
    # Bearer tokens only: a browser never sends cookies along.
    assert "access-control-allow-credentials" not in response.headers
    assert int(response.headers["access-control-max-age"]) > 0


async def test_a_preflight_from_another_origin_is_refused(cors_client: httpx.AsyncClient) -> None:
    response = await cors_client.options("/graphql", headers={"Origin": REFUSED, **PREFLIGHT})
    assert response.status_code == 400
    assert "access-control-allow-origin" not in response.headers


async def test_a_cross_origin_request_carries_the_header_and_works(
    cors_client: httpx.AsyncClient, workspace: Any
) -> None:
    headers = {"Origin": ALLOWED, "Authorization": f"Bearer {workspace.viewer}"}
    response = await cors_client.post("/graphql", json={"query": "{ viewer { role } }"}, headers=headers)
    assert response.status_code == 200
    assert response.json() == {"data": {"viewer": {"role": "viewer"}}}
    assert response.headers["access-control-allow-origin"] == ALLOWED
    # A refused request still shows its real error to the page, not "blocked by CORS".
    response = await cors_client.post(
        "/graphql", content=b"x" * 2_000_000, headers={**headers, "Content-Type": "application/json"}
    )
    assert response.status_code == 413
    assert response.headers["access-control-allow-origin"] == ALLOWED
    # Another origin gets its answer without the header: the browser keeps it from the page.
    response = await cors_client.post(
        "/graphql", json={"query": "{ viewer { role } }"}, headers={**headers, "Origin": REFUSED}
    )
    assert "access-control-allow-origin" not in response.headers


async def test_no_origin_is_allowed_by_default(client: httpx.AsyncClient) -> None:
    response = await client.options("/graphql", headers={"Origin": ALLOWED, **PREFLIGHT})
    assert response.status_code == 405
    assert "access-control-allow-origin" not in response.headers


async def test_websocket_handshakes_follow_the_same_origins(cors_app: Any, workspace: Any) -> None:
    async with serve(cors_app) as base_url:
        url = ws_url(base_url)
        async with ws_connect(url, subprotocols=[PROTOCOL], origin=ALLOWED) as ws:  # type: ignore[arg-type]
            client = GraphQLWS(ws)
            await client.init({"Authorization": f"Bearer {workspace.viewer}"})
        with pytest.raises(InvalidStatus) as refused:
            async with ws_connect(url, subprotocols=[PROTOCOL], origin=REFUSED):  # type: ignore[arg-type]
                pass
        assert refused.value.response.status_code == 403


@pytest.mark.parametrize(
    ("value", "normal"),
    [
        ("http://localhost:5173", ("http://localhost:5173",)),
        (
            "HTTPS://LocalHost:443, http://127.0.0.1:80, http://[::1]:8080",
            ("https://localhost", "http://127.0.0.1", "http://[::1]:8080"),
        ),
        ("*", ("*",)),
        ("", None),
    ],
)
def test_origins_are_read_as_browsers_send_them(
    monkeypatch: pytest.MonkeyPatch, value: str, normal: tuple[str, ...] | None
) -> None:
    monkeypatch.setenv("ENVERIF_CORS_ORIGINS", value)
    assert load_settings().cors_origins == normal


@pytest.mark.parametrize(
    "value", ["localhost:5173", "http://localhost:5173/app", "ftp://host", "http://h:99999"]
)
def test_what_is_not_an_origin_stops_start_up(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("ENVERIF_CORS_ORIGINS", value)
    with pytest.raises(ValueError, match="ENVERIF_CORS_ORIGINS"):
        load_settings()


# -- the spec's request errors --------------------------------------------------------------

TWO_OPERATIONS = "query A { viewer { role } } query B { viewer { workspace { name } } }"


@pytest.mark.parametrize("accept", ["application/json", "application/graphql-response+json"])
async def test_several_operations_without_operation_name_are_a_request_error(
    client: httpx.AsyncClient, workspace: Any, accept: str
) -> None:
    headers = {"Authorization": f"Bearer {workspace.viewer}", "Accept": accept}
    response = await client.post("/graphql", json={"query": TWO_OPERATIONS}, headers=headers)
    assert response.status_code == (400 if accept != "application/json" else 200)
    body = response.json()
    assert "data" not in body
    [error] = body["errors"]
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "operationName"}
    # The same text, told which operation to run, runs that one (and is not spoiled for later).
    for name, expected in [
        ("B", {"viewer": {"workspace": {"name": workspace.name}}}),
        ("A", {"viewer": {"role": "viewer"}}),
    ]:
        response = await client.post(
            "/graphql", json={"query": TWO_OPERATIONS, "operationName": name}, headers=headers
        )
        assert response.json() == {"data": expected}
    response = await client.post("/graphql", json={"query": TWO_OPERATIONS}, headers=headers)
    assert "data" not in response.json()


async def test_several_operations_over_the_websocket_are_refused_too(app: Any, workspace: Any) -> None:
    async with serve(app) as base_url:
        client = await GraphQLWS.open(ws_url(base_url), workspace.viewer)
        try:
            await client.send({"id": "1", "type": "subscribe", "payload": {"query": TWO_OPERATIONS}})
            message = await client.receive()
            assert message["type"] == "error", message
            assert message["payload"][0]["extensions"]["code"] == "VALIDATION_FAILED"
        finally:
            await client.close()


# -- not found -------------------------------------------------------------------------------


async def test_node_is_null_without_error_where_run_and_agent_are_not_found(
    gql: Any, make_workspace: Any
) -> None:
    mine, theirs = await make_workspace(), await make_workspace()
    foreign = await create_agent(gql, theirs.admin)
    for label, agent_id in [
        ("unknown", gid("Agent", 2**62)),
        ("foreign", foreign["id"]),
        ("malformed", "nope"),
    ]:
        body = await gql.raw("query($id: ID!) { node(id: $id) { id } }", {"id": agent_id}, token=mine.viewer)
        assert body == {"data": {"node": None}}, label
        for field in ("agent", "run"):
            body = await gql.raw(
                f"query($id: ID!) {{ {field}(id: $id) {{ id }} }}", {"id": agent_id}, token=mine.viewer
            )
            assert body["data"] == {field: None}, (label, field)
            assert [e["extensions"]["code"] for e in body["errors"]] == ["NOT_FOUND"], (label, field)
