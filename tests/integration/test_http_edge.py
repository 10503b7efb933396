"""The HTTP edge of /graphql under the attacks of someone with curl: odd bodies, huge bodies,
huge documents, schema probing, and the GraphQL-over-HTTP media types.

Everything goes through the real app over HTTP (httpx's ASGI transport), and through a real
uvicorn where the transport matters (a body refused before it is read).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.support.graphql import create_agent, create_memory, unique
from tests.support.servers import serve
from tests.support.ws import GraphQLWS, ws_url

GRAPHQL_RESPONSE = "application/graphql-response+json"


def auth(token: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **headers}


def assert_request_error(
    response: httpx.Response, status: int, *, media_type: str = "application/json"
) -> str:
    """A GraphQL-shaped refusal of the whole request; returns its message."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(media_type)
    body = response.json()
    assert "data" not in body
    [error] = body["errors"]
    assert error["extensions"] == {"code": "VALIDATION_FAILED"}
    assert isinstance(error["message"], str) and error["message"]
    return str(error["message"])


@pytest.fixture
async def production_client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings.model_copy(update={"env": "production"}))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://enverif.test") as c,
    ):
        yield c


# -- bodies that are not a GraphQL request ------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'"hello"', "JSON object"),
        (b"null", "JSON object"),
        (b"42", "JSON object"),
        (b"[]", "batching"),
        (b'[{"query": "{ viewer { role } }"}]', "batching"),
        (b'{"query": "\xff{ viewer { role } }"}', "UTF-8"),
        (b"\xfe\xff\x00{", "UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested"),
        (
            b'{"query": "{ viewer { role } }", "variables": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_001,
            "nested",
        ),
        (b'{"query": "{ viewer { role } }", "variables": {"x": NaN}}', "NaN"),
        (b'{"query": ', "JSON"),
        (b'{"query": "{ viewer { role } }", "variables": {"x": "\\ud800"}}', "surrogate"),
        (b'{"query": "{ viewer { role } }", "variables": {"x": "\\udc00\\ud800"}}', "surrogate"),
    ],
    ids=[
        "string",
        "null",
        "number",
        "empty-batch",
        "batch",
        "bad-utf8",
        "utf16",
        "deep-list",
        "deep-object",
        "nan",
        "truncated",
        "lone-surrogate",
        "reversed-pair",
    ],
)
async def test_bodies_that_are_not_a_json_object_get_a_graphql_shaped_400(
    client: httpx.AsyncClient, workspace: Any, body: bytes, says: str
) -> None:
    response = await client.post(
        "/graphql", content=body, headers=auth(workspace.viewer, **{"Content-Type": "application/json"})
    )
    assert says in assert_request_error(response, 400)


async def test_escaped_surrogate_pairs_are_characters(
    client: httpx.AsyncClient, gql: Any, workspace: Any
) -> None:
    agent = await create_agent(gql, workspace.admin)
    body = (
        b'{"query": "mutation($a: ID!, $i: MemoryInput!) { createMemory(agentId: $a, input: $i) { value } }",'
        b' "variables": {"a": "%s", "i": {"key": "k", "value": "\\ud83d\\ude00 \\\\ud800"}}}'
        % agent["id"].encode()
    )
    response = await client.post(
        "/graphql", content=body, headers=auth(workspace.operator, **{"Content-Type": "application/json"})
    )
    assert response.json() == {"data": {"createMemory": {"value": "\U0001f600 \\ud800"}}}


async def test_a_refused_body_answers_in_the_negotiated_media_type(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/graphql", content=b"null", headers={"Content-Type": "application/json", "Accept": GRAPHQL_RESPONSE}
    )
    assert_request_error(response, 400, media_type=GRAPHQL_RESPONSE)


async def test_no_mutations_over_get(client: httpx.AsyncClient, gql: Any, workspace: Any) -> None:
    name = unique("agent")
    mutation = 'mutation { createAgent(input: {name: "' + name + '", model: {provider: "scripted"}}) { id } }'
    response = await client.get("/graphql", params={"query": mutation}, headers=auth(workspace.admin))
    assert "mutation" in assert_request_error(response, 400).lower()
    data = await gql.ok("{ agents(first: 100) { edges { node { name } } } }", token=workspace.admin)
    assert name not in [edge["node"]["name"] for edge in data["agents"]["edges"]]


async def test_subscriptions_over_http_are_a_request_error(client: httpx.AsyncClient, workspace: Any) -> None:
    # Served on the websocket only; over POST strawberry would run one as a query (INTERNAL).
    subscription = 'subscription { runTree(rootRunId: "UnVuOjE") { seq } }'
    response = await client.post("/graphql", json={"query": subscription}, headers=auth(workspace.viewer))
    assert "websocket" in assert_request_error(response, 400)
    response = await client.get("/graphql", params={"query": subscription}, headers=auth(workspace.viewer))
    assert response.status_code == 400


async def test_other_methods_are_refused(client: httpx.AsyncClient) -> None:
    response = await client.put("/graphql", json={"query": "{ __typename }"})
    assert response.status_code == 405
    assert response.json()["errors"][0]["extensions"]["code"] == "VALIDATION_FAILED"


# -- huge documents ---------------------------------------------------------------------------


async def test_a_megabyte_document_is_refused_before_parsing(
    client: httpx.AsyncClient, workspace: Any
) -> None:
    # One string token of a megabyte: the token limit alone lets it through.
    document = "{ agents(first: 1) { edges { node { id } } } } # " + "a" * 1_000_000
    response = await client.post("/graphql", json={"query": document}, headers=auth(workspace.viewer))
    assert response.status_code == 200
    body = response.json()
    assert "data" not in body  # a request error
    [error] = body["errors"]
    assert error["extensions"] == {"code": "VALIDATION_FAILED"}
    assert "longer than" in error["message"]


async def test_a_megabyte_search_string_is_a_validation_error_not_internal(
    client: httpx.AsyncClient, gql: Any, workspace: Any
) -> None:
    agent = await create_agent(gql, workspace.admin)
    await create_memory(gql, workspace.operator, agent["id"])  # LIKE runs only when there are rows
    search = "query($agent: ID!, $q: String) { memories(agentId: $agent, query: $q, first: 5) { edges { node { id } } } }"
    for needle in ("x" * 60_000, "y" * 1_000_000):
        error = await gql.error(search, {"agent": agent["id"], "q": needle}, token=workspace.viewer)
        assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "query"}
    # Inline, as a single string token under the document limit.
    needle = "z" * 60_000
    inline = f'{{ memories(agentId: "{agent["id"]}", query: "{needle}", first: 5) {{ edges {{ node {{ id }} }} }} }}'
    error = await gql.error(inline, token=workspace.viewer)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "query"}


async def test_syntax_and_validation_errors_carry_a_code(gql: Any, workspace: Any) -> None:
    for document in ("{ agents { edges ", "{ agents { nope } }", "{ " + "a " * 6_000 + "}"):
        body = await gql.raw(document, token=workspace.viewer)
        assert "data" not in body
        assert {e["extensions"]["code"] for e in body["errors"]} == {"VALIDATION_FAILED"}


# -- production: no schema probing ------------------------------------------------------------

INTROSPECTION = [
    "{ __schema { types { name } } }",
    '{ __type(name: "Agent") { fields { name } } }',
    "{ viewer { role } __schema { queryType { name } } }",
]
TYPOS = [
    ("{ viewr { role } }", "'viewr'"),
    ("{ viewer { rol } }", "'rol'"),
    ("{ runs(status: [RUNNNG], first: 1) { edges { node { id } } } }", "RUNNNG"),
]


@pytest.mark.parametrize("document", INTROSPECTION)
async def test_production_refuses_introspection(
    production_client: httpx.AsyncClient, workspace: Any, document: str
) -> None:
    response = await production_client.post(
        "/graphql", json={"query": document}, headers=auth(workspace.viewer)
    )
    body = response.json()
    assert "data" not in body
    assert "introspection" in body["errors"][0]["message"].lower()
    assert body["errors"][0]["extensions"]["code"] == "VALIDATION_FAILED"


@pytest.mark.parametrize(("document", "mentions"), TYPOS)
async def test_production_gives_no_suggestions(
    production_client: httpx.AsyncClient, workspace: Any, document: str, mentions: str
) -> None:
    response = await production_client.post(
        "/graphql", json={"query": document}, headers=auth(workspace.viewer)
    )
    [error] = response.json()["errors"]
    assert mentions in error["message"]
    assert "did you mean" not in error["message"].lower()
    assert error["extensions"]["code"] == "VALIDATION_FAILED"


async def test_production_serves_no_graphiql_but_answers_typename(
    production_client: httpx.AsyncClient, workspace: Any
) -> None:
    page = await production_client.get("/graphql", headers={"Accept": "text/html"})
    assert page.status_code == 404
    assert "graphiql" not in page.text.lower()
    response = await production_client.post(
        "/graphql", json={"query": "{ __typename viewer { role } }"}, headers=auth(workspace.viewer)
    )
    assert response.json() == {"data": {"__typename": "Query", "viewer": {"role": "viewer"}}}


async def test_development_keeps_introspection_and_suggestions(
    client: httpx.AsyncClient, workspace: Any
) -> None:
    response = await client.post("/graphql", json={"query": INTROSPECTION[1]}, headers=auth(workspace.viewer))
    assert "errors" not in response.json()
    for document, _ in TYPOS:
        response = await client.post("/graphql", json={"query": document}, headers=auth(workspace.viewer))
        assert "Did you mean" in response.json()["errors"][0]["message"]


# -- GraphQL over HTTP: media types -----------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "media_type"),
    [
        (None, "application/json"),
        ("application/json", "application/json"),
        ("*/*", "application/json"),
        (GRAPHQL_RESPONSE, GRAPHQL_RESPONSE),
        (f"{GRAPHQL_RESPONSE}, application/json;q=0.9", GRAPHQL_RESPONSE),
        (f"application/json, {GRAPHQL_RESPONSE};q=0.5", "application/json"),
    ],
)
async def test_a_result_comes_in_the_accepted_media_type(
    client: httpx.AsyncClient, workspace: Any, accept: str | None, media_type: str
) -> None:
    headers = auth(workspace.viewer) | ({"Accept": accept} if accept else {})
    response = await client.post("/graphql", json={"query": "{ viewer { role } }"}, headers=headers)
    assert response.status_code == 200
    assert response.headers["content-type"] == f"{media_type}; charset=utf-8"
    assert response.json() == {"data": {"viewer": {"role": "viewer"}}}


REQUEST_ERRORS = [
    ({"query": "{ viewer { role "}, "Syntax Error"),
    ({"query": "{ viewer { nope } }"}, "Cannot query field"),
    ({"query": "query($id: ID!) { agent(id: $id) { id } }", "variables": {"id": None}}, "$id"),
    (
        {"query": "query($n: Int) { agents(first: $n) { edges { node { id } } } }", "variables": {"n": "x"}},
        "$n",
    ),
]


@pytest.mark.parametrize(("payload", "says"), REQUEST_ERRORS)
async def test_request_errors_are_400_without_data_for_graphql_response_json(
    client: httpx.AsyncClient, workspace: Any, payload: dict[str, Any], says: str
) -> None:
    response = await client.post(
        "/graphql", json=payload, headers=auth(workspace.viewer, Accept=GRAPHQL_RESPONSE)
    )
    assert response.status_code == 400
    assert response.headers["content-type"] == f"{GRAPHQL_RESPONSE}; charset=utf-8"
    body = response.json()
    assert "data" not in body
    assert says in body["errors"][0]["message"]
    assert body["errors"][0]["extensions"]["code"] == "VALIDATION_FAILED"


@pytest.mark.parametrize(("payload", "says"), REQUEST_ERRORS)
async def test_request_errors_stay_200_without_data_for_application_json(
    client: httpx.AsyncClient, workspace: Any, payload: dict[str, Any], says: str
) -> None:
    response = await client.post("/graphql", json=payload, headers=auth(workspace.viewer))
    assert response.status_code == 200
    body = response.json()
    assert "data" not in body
    assert says in body["errors"][0]["message"]


async def test_field_errors_are_200_with_data_for_graphql_response_json(
    client: httpx.AsyncClient, workspace: Any
) -> None:
    response = await client.post(
        "/graphql",
        json={"query": '{ viewer { role } agent(id: "nope") { id } }'},
        headers=auth(workspace.viewer, Accept=GRAPHQL_RESPONSE),
    )
    assert response.status_code == 200
    body = response.json()
    assert body["data"] == {"viewer": {"role": "viewer"}, "agent": None}
    assert body["errors"][0]["path"] == ["agent"]


async def test_an_unacceptable_accept_header_gets_406(client: httpx.AsyncClient, workspace: Any) -> None:
    response = await client.post(
        "/graphql", json={"query": "{ viewer { role } }"}, headers=auth(workspace.viewer, Accept="text/csv")
    )
    assert_request_error(response, 406)


# -- body size, through a real uvicorn ---------------------------------------------------------

LIMIT = 64 * 1024


@pytest.fixture
async def limited_server(settings: Settings) -> AsyncIterator[str]:
    app = create_app(settings.model_copy(update={"max_body_bytes": LIMIT}))
    async with app.router.lifespan_context(app), serve(app) as url:
        yield url


async def _open(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").split(":")
    return await asyncio.open_connection(host, int(port))


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in header_lines if line)
    body = await reader.readexactly(int(headers["content-length"]))
    return int(status_line.split()[1]), headers, body


async def test_a_declared_oversized_body_is_refused_before_it_is_sent(limited_server: str) -> None:
    reader, writer = await _open(limited_server)
    try:
        # Headers only: a server that waited for the 100 MB would never answer.
        writer.write(
            b"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000000\r\n\r\n"
        )
        await writer.drain()
        status, headers, body = await asyncio.wait_for(_read_response(reader), 10)
    finally:
        writer.close()
    assert status == 413
    assert headers["connection"] == "close"
    [error] = json.loads(body)["errors"]
    assert error["extensions"] == {"code": "VALIDATION_FAILED"}
    assert str(LIMIT) in error["message"]


async def test_a_chunked_body_is_cut_off_at_the_limit(limited_server: str) -> None:
    reader, writer = await _open(limited_server)
    chunk = b"x" * 16_384
    sent = 0
    total = 64 * 1024 * 1024

    async def send_body() -> None:
        nonlocal sent
        writer.write(
            b"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        while sent < total:
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
            sent += len(chunk)

    sender = asyncio.create_task(send_body())
    try:
        status, _, body = await asyncio.wait_for(_read_response(reader), 20)
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        writer.close()
    assert status == 413
    assert json.loads(body)["errors"][0]["extensions"] == {"code": "VALIDATION_FAILED"}
    # Answered long before the 64 MB were through (socket buffers hold a few MB at most).
    assert sent < total // 4


async def test_bodies_up_to_the_limit_are_served(limited_server: str, workspace: Any) -> None:
    async with httpx.AsyncClient(base_url=limited_server) as http:
        document = "{ viewer { role } } #" + "a" * (LIMIT - 200)
        response = await http.post("/graphql", json={"query": document}, headers=auth(workspace.viewer))
        assert response.status_code == 200
        assert response.json() == {"data": {"viewer": {"role": "viewer"}}}
        response = await http.post(
            "/graphql", json={"query": document + "a" * 400}, headers=auth(workspace.viewer)
        )
        assert response.status_code == 413


async def test_an_oversized_websocket_message_closes_the_socket(limited_server: str, workspace: Any) -> None:
    from websockets.exceptions import ConnectionClosed

    client = await GraphQLWS.open(ws_url(limited_server), workspace.viewer)
    try:
        query = "{ viewer { role } } #" + "a" * LIMIT
        await client.send({"id": "1", "type": "subscribe", "payload": {"query": query}})
        with pytest.raises(ConnectionClosed) as closed:
            await client.receive()
    finally:
        await client.close()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


@pytest.mark.parametrize(
    "message", ['"hello"', "[]", "null", '{"type": "connection_init", "payload": {"x": "\\ud800"}}']
)
async def test_a_websocket_message_that_is_not_a_json_object_closes_with_4400(
    limited_server: str, message: str
) -> None:
    from websockets.exceptions import ConnectionClosed

    client = await GraphQLWS.connect(ws_url(limited_server))
    try:
        await client.ws.send(message)  # as it is: not a JSON object
        with pytest.raises(ConnectionClosed) as closed:
            await client.receive()
    finally:
        await client.close()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4400
