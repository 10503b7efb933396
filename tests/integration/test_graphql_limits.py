"""Request limits through GraphQL over HTTP: the query cost limit, argument caps, the
statement budget of nested per-parent lists, the API's statement timeout, and documents
whose fragments expand exponentially."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from app.main import create_app
from app.services.runtime import open_runtime
from tests.conftest import GraphQLClient
from tests.integration.test_graphql_runs import count_statements
from tests.support.graphql import CREATE_AGENT, create_agent, create_memory, doubling, gid, pk, unique
from tests.support.runs import START_RUN
from tests.support.schedules import CREATE_SCHEDULE
from tests.support.trees import Rows

RUN_INPUT = "query($id: ID!) { run(id: $id) { input } }"
INCIDENT = "{ runs(first:100){edges{node{agent{runs(first:100){edges{node{agent{runs(first:5){edges{node{id}}}}}}}}}}}}"


async def test_the_incident_query_is_refused_before_execution(gql: Any, app: Any, workspace: Any) -> None:
    await gql.ok("{ viewer { role } }", token=workspace.viewer)  # warm: the first request builds things
    with count_statements(app) as statements:
        body = await gql.raw(INCIDENT, token=workspace.viewer)
    # How soon is bench/fragments.py's to measure; here, that nothing ran first.
    assert "data" not in body  # a request error
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "VALIDATION_FAILED"
    assert "70200" in error["message"] and "10000" in error["message"], error["message"]
    assert statements == []  # not even the token was looked up
    # ...and the server answers a normal query right after.
    assert (await gql.ok("{ runs(first: 5) { edges { node { id } } } }", token=workspace.viewer))["runs"]


async def test_cost_counts_fragments_and_variables(gql: Any, workspace: Any) -> None:
    query = """query($n: Int, $m: Int) { runs(first: $n) { edges { node { ...R } } } }
      fragment R on Run { agent { runs(first: $m) { edges { node { id } } } } }"""
    error = await gql.error(query, {"n": 100, "m": 100}, token=workspace.viewer)
    assert error["extensions"]["code"] == "VALIDATION_FAILED"
    assert "10200" in error["message"]
    assert (await gql.ok(query, {"n": 10, "m": 10}, token=workspace.viewer))["runs"] == {"edges": []}


async def test_first_over_the_page_cap_is_refused_by_name_before_execution(gql: Any, workspace: Any) -> None:
    error = await gql.error(
        "{ agents { edges { node { runs(first: 101) { edges { node { id } } } } } } }", token=workspace.viewer
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "first"}


NESTED = """
query($n: Int!) {
  agents(first: $n) { edges { node {
    id
    runs(first: 3) {
      pageInfo { hasNextPage }
      edges { node {
        id agent { id } stepsConnection(first: 2) { totalCount edges { node { id seq } } }
        childrenConnection(first: 2) { totalCount edges { node {
          id stepsConnection(first: 2) { totalCount edges { node { id } } } } } }
      } }
    }
    done: runs(first: 5, status: [SUCCEEDED]) { edges { node { id } } }
    memories(first: 2) { edges { node { key revisionsConnection(first: 2) {
      totalCount edges { node { action sourceRun { id } } } } } } }
    schedules { id cron }
  } } }
}
"""


async def _agents_with_children(gql: Any, ws: Any, sessionmaker: Any, count: int) -> list[dict[str, Any]]:
    rows = Rows(sessionmaker, ws.id)
    made = []
    for _ in range(count):
        agent = await create_agent(gql, ws.admin)
        agent_pk = pk(agent["id"])
        runs = [await rows.run(agent_pk, status=s) for s in ("SUCCEEDED", "FAILED", "SUCCEEDED", "SUCCEEDED")]
        await rows.step(runs[-1], seq=0)
        child = await rows.run(agent_pk, parent=runs[-1])
        await rows.step(child, seq=0)
        for key in ("m1", "m2", "m3"):
            await create_memory(gql, ws.operator, agent["id"], key=key)
        await gql.ok(
            'mutation($a: ID!) { createSchedule(agentId: $a, input: {cron: "@daily"}) { id } }',
            {"a": agent["id"]},
            token=ws.operator,
        )
        made.append(
            {"id": agent["id"], "runs": [gid("Run", r.id) for r in runs], "child": gid("Run", child.id)}
        )
    return made


async def test_nested_lists_cost_the_same_statements_for_2_or_20_parents(
    gql: Any, app: Any, make_workspace: Any, sessionmaker: Any
) -> None:
    counts = {}
    for size in (2, 20):
        ws = await make_workspace()
        made = await _agents_with_children(gql, ws, sessionmaker, size)
        with count_statements(app) as statements:
            data = await gql.ok(NESTED, {"n": size}, token=ws.viewer)
        counts[size] = len([s for s in statements if not s.startswith("BEGIN")])

        agents = {e["node"]["id"]: e["node"] for e in data["agents"]["edges"]}
        assert set(agents) == {m["id"] for m in made}
        for expected in made:
            agent = agents[expected["id"]]
            # Each agent gets its own newest page, not a share of one page for all of them.
            page = [e["node"] for e in agent["runs"]["edges"]]
            assert [r["id"] for r in page] == [expected["child"], *reversed(expected["runs"][-2:])]
            assert agent["runs"]["pageInfo"]["hasNextPage"] is True
            assert {r["agent"]["id"] for r in page} == {expected["id"]}
            newest_root = page[1]
            (child,) = [e["node"] for e in newest_root["childrenConnection"]["edges"]]
            assert child["id"] == expected["child"]
            assert newest_root["childrenConnection"]["totalCount"] == 1
            assert newest_root["stepsConnection"]["totalCount"] == 1
            assert len(newest_root["stepsConnection"]["edges"]) == 1
            assert child["stepsConnection"]["totalCount"] == len(child["stepsConnection"]["edges"]) == 1
            assert [e["node"]["id"] for e in agent["done"]["edges"]] == [
                expected["child"],
                expected["runs"][3],
                expected["runs"][2],
                expected["runs"][0],
            ]
            assert [e["node"]["key"] for e in agent["memories"]["edges"]] == ["m3", "m2"]
            revisions = [e["node"]["revisionsConnection"] for e in agent["memories"]["edges"]]
            assert all(
                r["edges"][0]["node"]["action"] == "CREATE" and r["totalCount"] == 1 for r in revisions
            )
            assert len(agent["schedules"]) == 1

    # Authentication plus one statement per relation per level (about 12). A batch can split
    # across event-loop ticks, so a small slack; a per-agent statement would add 18+ per list.
    assert counts[20] <= counts[2] + 3, counts
    assert counts[20] <= 16, counts


async def test_per_parent_pages_follow_cursors_and_filters(
    gql: Any, workspace: Any, sessionmaker: Any
) -> None:
    agent = await create_agent(gql, workspace.admin)
    other = await create_agent(gql, workspace.admin)
    rows = Rows(sessionmaker, workspace.id)
    runs = [await rows.run(pk(agent["id"])) for _ in range(5)]
    await rows.run(pk(other["id"]))
    for i in range(3):
        # Keys of 3+ characters: MariaDB's full-text index skips shorter words.
        await create_memory(gql, workspace.operator, agent["id"], key=f"key{i}", tags=["x"] if i else ["y"])
    query = """query($id: ID!, $after: String) { node(id: $id) { ... on Agent {
        runs(first: 2, after: $after) { edges { node { id } } pageInfo { hasNextPage endCursor } }
        tagged: memories(tags: ["x"]) { edges { node { key } } }
        found: memories(query: "KEY0") { edges { node { key } } }
    } } }"""
    seen: list[str] = []
    after = None
    while True:
        node = (await gql.ok(query, {"id": agent["id"], "after": after}, token=workspace.viewer))["node"]
        seen += [e["node"]["id"] for e in node["runs"]["edges"]]
        if not node["runs"]["pageInfo"]["hasNextPage"]:
            break
        after = node["runs"]["pageInfo"]["endCursor"]
    assert seen == [gid("Run", r.id) for r in reversed(runs)]
    assert [e["node"]["key"] for e in node["tagged"]["edges"]] == ["key2", "key1"]
    assert [e["node"]["key"] for e in node["found"]["edges"]] == ["key0"]


# -- argument caps ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "variables", "field"),
    [
        (
            "query($a: ID!, $t: [String!]) { memories(agentId: $a, tags: $t) { edges { node { id } } } }",
            {"t": [f"t{i}" for i in range(20_000)]},
            "tags",
        ),
        (
            "query($a: ID!, $q: String) { memories(agentId: $a, query: $q) { edges { node { id } } } }",
            {"q": "x" * 1_001},
            "query",
        ),
        (
            "query($s: [RunStatus!]) { runs(status: $s) { edges { node { id } } } }",
            {"s": ["FAILED"] * 101},
            "status",
        ),
        ("query($id: ID!) { run(id: $id) { id } }", {"id": "A" * 5_000}, "id"),
        (
            "query($a: ID!, $t: [String!]) { agent(id: $a) { memories(tags: $t) { edges { node { id } } } } }",
            {"t": ["t"] * 500},
            "tags",
        ),
        (
            'mutation($a: ID!, $t: [String!]) { createMemory(agentId: $a, input: {key: "k", value: "v", tags: $t}) { id } }',
            {"t": ["t"] * 500},
            "tags",
        ),
        (
            "mutation($n: String!) { createAgent(input: {name: $n, model: {}}) { id } }",
            {"n": "n" * 1_001},
            "name",
        ),
    ],
    ids=["query-tags", "query-string", "status-list", "id", "nested-tags", "mutation-tags", "mutation-name"],
)
async def test_oversized_arguments_are_refused_naming_the_field(
    gql: Any, app: Any, workspace: Any, query: str, variables: dict[str, Any], field: str
) -> None:
    agent = await create_agent(gql, workspace.admin)
    variables = {"a": agent["id"], **variables} if "$a" in query else variables
    with count_statements(app) as statements:
        started = time.perf_counter()
        error = await gql.error(query, variables, token=workspace.admin)
        elapsed = time.perf_counter() - started
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": field}, error
    assert statements == []
    # 20,000 tags once took 16 s; refused, it costs about as much as parsing the body (a loose
    # bound: the test machine is shared).
    assert elapsed < 2.0, elapsed


async def test_arguments_within_the_caps_still_work(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    await create_memory(gql, workspace.operator, agent["id"], key="k", tags=["t0"], value="v" * 5_000)
    data = await gql.ok(
        "query($a: ID!, $t: [String!]) { memories(agentId: $a, tags: $t) { edges { node { key } } } }",
        {"a": agent["id"], "t": ["t0"] * 100},
        token=workspace.viewer,
    )
    assert [e["node"]["key"] for e in data["memories"]["edges"]] == ["k"]


# -- statement timeout ------------------------------------------------------------------------


# Runs for minutes unless stopped: a billion-row recursive count.
SLOW = {
    "sqlite": "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000000000) "
    "SELECT count(*) FROM c",
    "mysql": "SELECT SLEEP(30)",
}


async def test_api_sessions_carry_the_statement_timeout(settings: Any) -> None:
    kind = "sqlite" if settings.is_sqlite else "mysql"
    rt = await open_runtime(settings.model_copy(update={"db_statement_timeout_ms": 300}))
    try:
        async with rt.read_sessionmaker() as session:
            started = time.perf_counter()
            with pytest.raises(OperationalError, match="interrupted"):
                await session.execute(text(SLOW[kind]))
            assert time.perf_counter() - started < 5
        # The pool is fine afterwards, and a statement that fits is not cut short.
        async with rt.read_sessionmaker() as session:
            assert await session.scalar(text("SELECT 1")) == 1
        async with rt.sessionmaker() as session, session.begin():
            assert await session.scalar(text("SELECT count(*) FROM workspaces")) >= 0
    finally:
        await rt.close()
    if kind == "mysql":
        worker = await open_runtime(settings.model_copy(update={"db_statement_timeout_ms": 300}), worker=True)
        try:
            async with worker.sessionmaker() as session:
                assert float(await session.scalar(text("SELECT @@max_statement_time"))) == 0
        finally:
            await worker.close()


@pytest.mark.parametrize("env", ["development", "production"])
@pytest.mark.parametrize("aliased", [False, True])
async def test_fragment_doubling_documents_are_refused_at_once_with_or_without_a_token(
    settings: Any, workspace: Any, env: str, aliased: bool
) -> None:
    """24 levels of fragments each spreading the previous one twice: 2^24 fields once
    expanded, ~1 KB of text. Refused in milliseconds, before any validation walks it."""
    application = create_app(settings.model_copy(update={"env": env}))
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://enverif.test") as http:
            gql = GraphQLClient(http)
            for i, token in enumerate([None, workspace.viewer, workspace.admin]):
                # A fresh comment each time, so the document cache cannot answer.
                document = doubling(24, aliased=aliased) + f"\n# attempt {i}"
                started = time.perf_counter()
                body = await gql.raw(document, token=token)
                elapsed = time.perf_counter() - started
                assert elapsed < 0.5, elapsed
                assert "data" not in body or body["data"] is None
                (error,) = body["errors"]
                assert error["extensions"]["code"] == "VALIDATION_FAILED", error
                assert ("aliases" if aliased else "fields") in error["message"]
            # The same fragments at a harmless size still work.
            assert await gql.ok(doubling(4, aliased=aliased), token=workspace.viewer) == {
                "runs": {"edges": []}
            }


def _nested(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"down": value}
    return value


async def test_json_deeper_than_mariadb_stores_is_refused_at_every_entry(gql: Any, workspace: Any) -> None:
    """31 objects deep (32 levels) is stored on both databases; one more was INTERNAL on
    MariaDB (error 4025) and stored on SQLite. Now VALIDATION_FAILED naming the field."""
    agent = await create_agent(gql, workspace.admin)
    deep, deepest = {"x": _nested(30)}, {"x": _nested(31)}  # 32 and 33 levels
    run = await gql.ok(START_RUN, {"agentId": agent["id"], "input": deep}, token=workspace.operator)
    stored = await gql.ok(RUN_INPUT, {"id": run["startRun"]["id"]}, token=workspace.viewer)
    assert stored["run"]["input"] == deep
    error = await gql.error(START_RUN, {"agentId": agent["id"], "input": deepest}, token=workspace.operator)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "input"}
    assert "33 levels deep; at most 32" in error["message"]
    schedule = {"cron": "@daily", "input": deepest}
    error = await gql.error(
        CREATE_SCHEDULE, {"agentId": agent["id"], "input": schedule}, token=workspace.operator
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "input"}
    model = {"provider": "scripted", "steps": [{"final": _nested(32)}]}
    error = await gql.error(
        CREATE_AGENT, {"input": {"name": unique(), "model": model}}, token=workspace.admin
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "model"}


async def test_a_response_over_the_byte_cap_is_refused_not_truncated(settings: Any, workspace: Any) -> None:
    application = create_app(settings.model_copy(update={"max_response_bytes": 65_536}))
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://enverif.test") as http:
            gql = GraphQLClient(http)
            for i in range(3):
                await create_agent(gql, workspace.admin, description=f"{i}" + "d" * 30_000)
            query = "query($n: Int) { agents(first: $n) { edges { node { name description } } } }"
            body = await gql.raw(query, {"n": 3}, token=workspace.viewer)
            assert body["data"] is None
            (error,) = body["errors"]
            assert error["extensions"] == {"code": "VALIDATION_FAILED"}
            assert "over the limit of 65536" in error["message"]
            one = await gql.ok(query, {"n": 1}, token=workspace.viewer)  # 30 KB: served whole
            assert len(one["agents"]["edges"][0]["node"]["description"]) == 30_001
