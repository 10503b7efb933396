"""What a frontend on another origin meets at /graphql (docs/graphql/frontends.md): CORS
preflights, the spec's request errors, and null-versus-NOT_FOUND for ids.

Through the real app over HTTP (httpx's ASGI transport), and a real uvicorn for websocket
handshakes (browsers send ``Origin`` there too, and CORS does not apply to them).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus

from app.main import create_app
from app.settings import Settings, load_settings
from tests.support.graphql import create_agent, gid, unique
from tests.support.runs import scripted_agent, start_run, wait_run
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
    "value", ["localhost:5173", "http://localhost:5173/app", "ftp://127.0.0.1", "http://127.0.0.1:99999"]
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


# -- every id inside JSON is the global id ---------------------------------------------------

IDS_TREE = """
query($id: ID!) {
  run(id: $id) {
    id result policyChain
    steps { tool result childRun { id } }
    children { id policyChain delegation { parentStep { id } } }
    agent { id }
  }
}
"""


async def test_ids_inside_json_values_are_global_ids(app: Any, gql: Any, workspace: Any, worker: Any) -> None:
    leaf_name = unique("leaf")
    leaf = await scripted_agent(gql, workspace.admin, name=leaf_name, steps=[{"final": "leaf done"}])
    root = await scripted_agent(
        gql,
        workspace.admin,
        tools=["agents.*"],
        steps=[
            {"call": "agents.delegate", "args": {"agent": leaf_name, "task": "t"}},
            {"final": {"childRun": "{{ results[0].runId }}"}},
        ],
    )
    run_id = await start_run(gql, workspace.operator, root)
    assert (await wait_run(gql, workspace.viewer, run_id, timeout_s=30))["status"] == "SUCCEEDED"
    run = (await gql.ok(IDS_TREE, {"id": run_id}, token=workspace.viewer))["run"]
    [child] = run["children"]
    [step, _final] = run["steps"]
    # The delegate call's outcome, as the model read it and as the step shows it.
    assert step["result"]["runId"] == step["childRun"]["id"] == child["id"]
    assert run["result"] == {"childRun": child["id"]}
    [link] = run["policyChain"]
    assert link["agentId"] == root and set(link) == {"agentId", "agentName", "policy"}
    assert [link["agentId"] for link in child["policyChain"]] == [root, leaf]
    assert child["policyChain"][1]["agentName"] == leaf_name

    # Event payloads, replayed from the log over the websocket.
    async with serve(app) as base_url:
        client = await GraphQLWS.open(ws_url(base_url), workspace.viewer)
        try:
            await client.subscribe("1", run_id, after_seq=0)
            stream = await client.events(
                "1",
                until=lambda e: (
                    e["type"] == "RUN_STATUS_CHANGED" and e["runId"] == run_id and e["status"] == "SUCCEEDED"
                ),
            )
        finally:
            await client.close()
    created = {e["runId"]: e["payload"] for e in stream.events if e["type"] == "RUN_CREATED"}
    assert created[run_id]["agentId"] == root
    assert created[child["id"]]["agentId"] == leaf
    assert created[child["id"]]["parentStepId"] == child["delegation"]["parentStep"]["id"]
    child_ids = [e["payload"]["childRunId"] for e in stream.events if "childRunId" in (e["payload"] or {})]
    assert child_ids == [child["id"]]
    for event in stream.events:
        for key in ("agentId", "runId", "childRunId", "parentStepId", "approvalId"):
            assert not isinstance((event["payload"] or {}).get(key), int), event


# -- ids for normalised caches, enums ---------------------------------------------------------

# Object types without an id, each with the reason a cache need not normalise it.
WITHOUT_ID = {
    "Query": "a root type",
    "Mutation": "a root type",
    "Subscription": "a root type",
    "PageInfo": "belongs to the one connection that holds it",
    "Viewer": "the caller: one per token, a singleton for a cache",
    "CreatedApiToken": "a mutation's one-time answer (the token itself is shown once)",
    "RunOutputChunk": "a subscription's passing event, never stored (the step keeps the text)",
    "Usage": "a value of the one field that holds it (Run.usage, Run.treeUsage, RunStep.usage)",
    "BudgetLimit": "an entry of Run.budget, read whole with its run",
    "McpTool": "an entry of McpServer.tools, replaced whole by each sync (named by its name)",
    "ApprovalWebhook": "a value of Workspace.approvalWebhook, replaced whole by setApprovalWebhook",
    "PolicyPreview": "a computed answer to one policyPreview question, never stored",
    "PolicyPreviewLink": "an entry of PolicyPreview.chain, read whole with its answer",
    "ApprovalEvent": "a subscription's passing event (the approval it names has its id)",
    "RemoveMemoryPayload": "a mutation's answer about an object that is gone (deletedId names it)",
    "RemoveSchedulePayload": "a mutation's answer about an object that is gone (deletedId names it)",
    "RemoveMcpServerPayload": "a mutation's answer about an object that is gone (deletedId names it)",
}

# Objects whose id is there only sometimes: an Actor's is its token's, null for the CLI and
# the system (a value of the field that names them, so a cache keeps it in its parent).
NULLABLE_ID = {"Actor"}

TYPES = """{ __schema { types { name kind fields { name type { kind name ofType { kind name } } } } } }"""


async def test_every_object_a_client_can_fetch_twice_has_an_id(gql: Any, workspace: Any) -> None:
    types = (await gql.ok(TYPES, token=workspace.viewer))["__schema"]["types"]
    missing = []
    for t in types:
        name = t["name"]
        if t["kind"] != "OBJECT" or name.startswith("__") or name.endswith(("Connection", "Edge")):
            continue
        fields = {f["name"]: f["type"] for f in t["fields"]}
        if name in WITHOUT_ID:
            assert "id" not in fields, f"{name} has an id now: drop it from WITHOUT_ID"
            continue
        if name in NULLABLE_ID:
            assert fields.get("id") == {"kind": "SCALAR", "name": "ID", "ofType": None}, name
            continue
        if fields.get("id") != {"kind": "NON_NULL", "name": None, "ofType": {"kind": "SCALAR", "name": "ID"}}:
            missing.append(name)
    assert not missing, f"object types without an id: {missing}"
    event = next(t for t in types if t["name"] == "RunEvent")
    [kind] = [f["type"]["ofType"] for f in event["fields"] if f["name"] == "type"]
    assert kind == {"kind": "ENUM", "name": "RunEventType"}


CACHE_IDS = """
query($id: ID!) {
  run(id: $id) {
    id
    agent { id policy { id rules { id tool } } memoryBudget { id } }
    children { id delegation { id task } }
  }
}
"""


async def test_ids_of_embedded_objects_are_stable_and_unique(
    app: Any, gql: Any, workspace: Any, worker: Any
) -> None:
    leaf_name = unique("leaf")
    await scripted_agent(gql, workspace.admin, name=leaf_name, steps=[{"final": "ok"}])
    root = await scripted_agent(
        gql,
        workspace.admin,
        tools=["agents.*"],
        policy={"rules": [{"tool": "agents.*", "decision": "ALLOW"}, {"tool": "http.*", "decision": "DENY"}]},
        steps=[{"call": "agents.delegate", "args": {"agent": leaf_name, "task": "t"}}, {"final": "done"}],
    )
    run_id = await start_run(gql, workspace.operator, root)
    assert (await wait_run(gql, workspace.viewer, run_id, timeout_s=30))["status"] == "SUCCEEDED"
    first = (await gql.ok(CACHE_IDS, {"id": run_id}, token=workspace.viewer))["run"]
    again = (await gql.ok(CACHE_IDS, {"id": run_id}, token=workspace.viewer))["run"]
    assert first == again  # the same object answers with the same id every time
    agent = first["agent"]
    [child] = first["children"]
    ids = [
        first["id"],
        agent["id"],
        agent["policy"]["id"],
        agent["memoryBudget"]["id"],
        *(rule["id"] for rule in agent["policy"]["rules"]),
        child["id"],
        child["delegation"]["id"],
    ]
    assert len(set(ids)) == len(ids) == 8, ids
    # Not nodes: node(id:) answers them with null, like any id it cannot serve.
    body = await gql.raw(
        "query($id: ID!) { node(id: $id) { id } }", {"id": agent["policy"]["id"]}, token=workspace.viewer
    )
    assert body == {"data": {"node": None}}
    async with serve(app) as base_url:
        client = await GraphQLWS.open(ws_url(base_url), workspace.viewer)
        try:
            query = "subscription($root: ID!, $after: Int) { runTree(rootRunId: $root, afterSeq: $after) { id seq type } }"
            await client.subscribe("1", run_id, after_seq=0, query=query)
            stream = await client.events("1", count=4)
        finally:
            await client.close()
    assert len({e["id"] for e in stream.events}) == 4
    assert all(
        e["type"] in {"RUN_CREATED", "RUN_STATUS_CHANGED", "STEP_STARTED", "STEP_FINISHED"}
        for e in stream.events
    )


# -- GET and automatic persisted queries -----------------------------------------------------

ROLE_QUERY = "query Role { viewer { role } }"


def apq(query: str) -> dict[str, Any]:
    return {"persistedQuery": {"version": 1, "sha256Hash": hashlib.sha256(query.encode()).hexdigest()}}


async def test_queries_over_get_are_served_and_marked_private(
    client: httpx.AsyncClient, workspace: Any
) -> None:
    headers = {"Authorization": f"Bearer {workspace.viewer}"}
    response = await client.get(
        "/graphql", params={"query": ROLE_QUERY, "operationName": "Role"}, headers=headers
    )
    assert response.status_code == 200
    assert response.json() == {"data": {"viewer": {"role": "viewer"}}}
    assert response.headers["cache-control"] == "private, no-cache"
    assert response.headers["vary"] == "Authorization, Accept"
    variables = json.dumps({"first": 1})
    response = await client.get(
        "/graphql",
        params={
            "query": "query($first: Int) { agents(first: $first) { edges { cursor } } }",
            "variables": variables,
        },
        headers=headers,
    )
    assert response.json() == {"data": {"agents": {"edges": []}}}


async def test_automatic_persisted_queries_over_post_and_get(
    client: httpx.AsyncClient, workspace: Any
) -> None:
    headers = {"Authorization": f"Bearer {workspace.viewer}"}
    query = f"query Apq {{ viewer {{ role }} }} # {uuid.uuid4().hex}"  # a text no earlier test sent
    # The hash alone, unknown yet: the client is told to send the document.
    response = await client.post("/graphql", json={"extensions": apq(query)}, headers=headers)
    assert response.status_code == 200
    assert response.json() == {
        "errors": [{"message": "PersistedQueryNotFound", "extensions": {"code": "PERSISTED_QUERY_NOT_FOUND"}}]
    }
    # Hash and document: stored and run.
    response = await client.post("/graphql", json={"query": query, "extensions": apq(query)}, headers=headers)
    assert response.json() == {"data": {"viewer": {"role": "viewer"}}}
    # From now on the hash alone runs it, over POST and over GET.
    response = await client.post("/graphql", json={"extensions": apq(query)}, headers=headers)
    assert response.json() == {"data": {"viewer": {"role": "viewer"}}}
    response = await client.get("/graphql", params={"extensions": json.dumps(apq(query))}, headers=headers)
    assert response.json() == {"data": {"viewer": {"role": "viewer"}}}
    # A hash that is not the document's is refused, and stores nothing.
    other = "query Other { viewer { workspace { name } } }"
    response = await client.post(
        "/graphql", json={"query": other, "extensions": apq(query + " ")}, headers=headers
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "VALIDATION_FAILED"
    response = await client.post("/graphql", json={"extensions": apq(query + " ")}, headers=headers)
    assert response.json()["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"
    response = await client.post(
        "/graphql",
        json={"extensions": {"persistedQuery": {"version": 2, "sha256Hash": "x"}}},
        headers=headers,
    )
    assert response.status_code == 400


async def test_a_persisted_mutation_is_still_refused_over_get(
    client: httpx.AsyncClient, gql: Any, workspace: Any
) -> None:
    mutation = (
        'mutation { createAgent(input: {name: "'
        + unique("apq")
        + '", model: {provider: "scripted"}}) { id } }'
    )
    headers = {"Authorization": f"Bearer {workspace.admin}"}
    response = await client.get(
        "/graphql", params={"query": mutation, "extensions": json.dumps(apq(mutation))}, headers=headers
    )
    assert response.status_code == 400
    assert "data" not in response.json()
    data = await gql.ok("{ agents(first: 100) { edges { node { id } } } }", token=workspace.admin)
    assert data["agents"]["edges"] == []


# -- lookups ---------------------------------------------------------------------------------


async def test_agent_by_name_is_exact_and_nodes_answer_in_order(gql: Any, make_workspace: Any) -> None:
    mine, theirs = await make_workspace(), await make_workspace()
    agent = await create_agent(gql, mine.admin, name=unique("Scout"))
    foreign = await create_agent(gql, theirs.admin)
    data = await gql.ok(
        "query($n: String!) { agentByName(name: $n) { id } }", {"n": agent["name"]}, token=mine.viewer
    )
    assert data == {"agentByName": {"id": agent["id"]}}
    for name in (agent["name"].lower(), agent["name"] + " ", foreign["name"]):
        body = await gql.raw(
            "query($n: String!) { agentByName(name: $n) { id } }", {"n": name}, token=mine.viewer
        )
        assert body["data"] == {"agentByName": None}, name
        assert [e["extensions"]["code"] for e in body["errors"]] == ["NOT_FOUND"], name
    ids = [
        foreign["id"],
        agent["id"],
        "nope",
        mine_ws := (await gql.ok("{ viewer { workspace { id } } }", token=mine.viewer))["viewer"][
            "workspace"
        ]["id"],
    ]
    data = await gql.ok(
        "query($ids: [ID!]!) { nodes(ids: $ids) { __typename id } }", {"ids": ids}, token=mine.viewer
    )
    assert data["nodes"] == [
        None,
        {"__typename": "Agent", "id": agent["id"]},
        None,
        {"__typename": "Workspace", "id": mine_ws},
    ]
