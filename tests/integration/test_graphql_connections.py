"""What every connection shares (docs/graphql/frontends.md: paging): `totalCount`, backward
paging with `last`/`before`, `orderBy`, cursors bound to their list and ordering, the list
filters of issue 27, and the paged forms of the lists that had none (issue 20: `Run.steps`,
`children`, `descendants`, `Memory.revisions` read at most a page; their `...Connection`
fields page through everything), on a response size cap that holds on the websocket too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.conftest import GraphQLClient
from tests.support.graphql import create_agent, create_memory, gid, pk
from tests.support.servers import serve
from tests.support.trees import Rows
from tests.support.ws import GraphQLWS

AGENTS = """
query($first: Int, $after: String, $last: Int, $before: String, $order: Ordering) {
  agents(first: $first, after: $after, last: $last, before: $before, orderBy: $order) {
    totalCount
    edges { cursor node { id } }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
  }
}
"""


def ids(connection: dict[str, Any]) -> list[str]:
    return [e["node"]["id"] for e in connection["edges"]]


async def _agents(gql: Any, token: str, **variables: Any) -> dict[str, Any]:
    data: dict[str, Any] = (await gql.ok(AGENTS, variables, token=token))["agents"]
    return data


async def test_paging_backward_covers_the_list_once_in_its_order(gql: Any, workspace: Any) -> None:
    created = [(await create_agent(gql, workspace.admin))["id"] for _ in range(7)]
    newest_first = list(reversed(created))
    pages: list[list[str]] = []
    before = None
    while True:
        page = await _agents(gql, workspace.viewer, last=3, before=before)
        assert page["totalCount"] == 7
        pages.insert(0, ids(page))
        assert page["pageInfo"]["hasNextPage"] is (before is not None)
        if not page["pageInfo"]["hasPreviousPage"]:
            break
        before = page["pageInfo"]["startCursor"]
    assert [len(p) for p in pages] == [1, 3, 3]
    assert [i for p in pages for i in p] == newest_first


async def test_order_by_oldest_first_and_between_two_cursors(gql: Any, workspace: Any) -> None:
    created = [(await create_agent(gql, workspace.admin))["id"] for _ in range(6)]
    oldest = await _agents(gql, workspace.viewer, first=10, order="OLDEST_FIRST")
    assert ids(oldest) == created
    edges = oldest["edges"]
    # after the first and before the last, in the oldest-first order: the four between.
    window = await _agents(
        gql, workspace.viewer, after=edges[0]["cursor"], before=edges[5]["cursor"], order="OLDEST_FIRST"
    )
    assert ids(window) == created[1:5]
    assert window["totalCount"] == 6  # the list's size, not the window's
    last_two = await _agents(gql, workspace.viewer, last=2, before=edges[5]["cursor"], order="OLDEST_FIRST")
    assert ids(last_two) == created[3:5]
    assert last_two["pageInfo"] == {
        "hasNextPage": True,
        "hasPreviousPage": True,
        "startCursor": last_two["edges"][0]["cursor"],
        "endCursor": last_two["edges"][1]["cursor"],
    }


async def test_a_cursor_works_only_in_its_own_list_and_order(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    await create_agent(gql, workspace.admin)
    cursor = (await _agents(gql, workspace.viewer, first=1))["edges"][0]["cursor"]
    assert len(ids(await _agents(gql, workspace.viewer, first=5, after=cursor))) == 1
    for variables in (
        {"after": cursor, "order": "OLDEST_FIRST"},
        {"before": cursor, "order": "OLDEST_FIRST"},
    ):
        error = await gql.error(AGENTS, variables, token=workspace.viewer)
        field = "after" if "after" in variables else "before"
        assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": field}
    # An agents cursor given to runs, and to the same agent's own runs.
    runs = "query($after: String) { runs(after: $after) { edges { cursor } } }"
    error = await gql.error(runs, {"after": cursor}, token=workspace.viewer)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "after"}
    nested = "query($id: ID!, $after: String) { agent(id: $id) { runs(after: $after) { totalCount } } }"
    error = await gql.error(nested, {"id": agent["id"], "after": cursor}, token=workspace.viewer)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "after"}


async def test_first_and_last_together_are_refused(gql: Any, workspace: Any) -> None:
    error = await gql.error(AGENTS, {"first": 1, "last": 1}, token=workspace.viewer)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "last"}
    error = await gql.error(AGENTS, {"last": 101}, token=workspace.viewer)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "last"}


async def test_agents_by_statuses_and_the_deprecated_single_status(gql: Any, workspace: Any) -> None:
    active = await create_agent(gql, workspace.admin)
    paused = await create_agent(gql, workspace.admin)
    await gql.ok(
        "mutation($id: ID!) { updateAgent(id: $id, input: {status: PAUSED}) { id } }",
        {"id": paused["id"]},
        token=workspace.admin,
    )
    query = """query($one: AgentStatus, $many: [AgentStatus!]) {
      agents(status: $one, statuses: $many) { totalCount edges { node { id } } } }"""
    both = (await gql.ok(query, {"many": ["ACTIVE", "PAUSED"]}, token=workspace.viewer))["agents"]
    assert both["totalCount"] == 2
    only = (await gql.ok(query, {"one": "PAUSED"}, token=workspace.viewer))["agents"]
    assert ids(only) == [paused["id"]]
    literal = await gql.ok("{ agents(statuses: ACTIVE) { edges { node { id } } } }", token=workspace.viewer)
    assert ids(literal["agents"]) == [active["id"]]


RUNS = """
query($trigger: [RunTrigger!], $after: DateTime, $before: DateTime, $agent: ID) {
  runs(trigger: $trigger, createdAfter: $after, createdBefore: $before, agentId: $agent) {
    totalCount edges { node { id trigger createdAt } }
  }
}
"""


async def test_runs_by_trigger_and_creation_time(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    rows = Rows(sessionmaker, workspace.id)
    api = [await rows.run(pk(agent["id"])) for _ in range(3)]
    scheduled = [await rows.run(pk(agent["id"]), trigger="SCHEDULE") for _ in range(2)]

    by_trigger = (await gql.ok(RUNS, {"trigger": ["SCHEDULE"]}, token=workspace.viewer))["runs"]
    assert [pk(i) for i in ids(by_trigger)] == [r.id for r in reversed(scheduled)]
    assert by_trigger["totalCount"] == 2

    # Strictly between the first API run and the last scheduled one.
    window = {
        "after": api[0].created_at.isoformat(),
        "before": scheduled[-1].created_at.isoformat(),
        "agent": agent["id"],
    }
    between = (await gql.ok(RUNS, window, token=workspace.viewer))["runs"]
    assert [pk(i) for i in ids(between)] == [scheduled[0].id, api[2].id, api[1].id]
    assert between["totalCount"] == 3

    naive = {"after": (api[0].created_at - timedelta(days=1)).replace(tzinfo=None).isoformat()}
    error = await gql.error(RUNS, naive, token=workspace.viewer)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "createdAfter"}


async def test_approvals_by_run_and_by_agent(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    one, two = await create_agent(gql, workspace.admin), await create_agent(gql, workspace.admin)
    rows = Rows(sessionmaker, workspace.id)
    runs = [await rows.run(pk(one["id"])), await rows.run(pk(one["id"])), await rows.run(pk(two["id"]))]
    approvals = [await rows.approval(run, await rows.step(run, seq=0, tool="webhook.post")) for run in runs]
    query = """query($run: ID, $agent: ID) { approvals(runId: $run, agentId: $agent) {
      totalCount edges { node { id } } } }"""

    by_run = (await gql.ok(query, {"run": gid("Run", runs[1].id)}, token=workspace.viewer))["approvals"]
    assert ids(by_run) == [gid("Approval", approvals[1].id)]
    by_agent = (await gql.ok(query, {"agent": one["id"]}, token=workspace.viewer))["approvals"]
    assert ids(by_agent) == [gid("Approval", approvals[1].id), gid("Approval", approvals[0].id)]
    assert by_agent["totalCount"] == 2
    both = {"run": gid("Run", runs[2].id), "agent": one["id"]}
    assert (await gql.ok(query, both, token=workspace.viewer))["approvals"]["totalCount"] == 0

    error = await gql.error(query, {"run": gid("Agent", 1)}, token=workspace.viewer)
    assert error["extensions"]["code"] == "NOT_FOUND" and error["extensions"]["field"] == "runId"


async def test_nested_connections_count_per_parent(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    agents = [await create_agent(gql, workspace.admin) for _ in range(3)]
    rows = Rows(sessionmaker, workspace.id)
    for n, agent in enumerate(agents):
        for _ in range(n + 1):
            await rows.run(pk(agent["id"]))
    query = """{ agents(orderBy: OLDEST_FIRST) { edges { node { id
      runs(first: 1) { totalCount edges { node { id } } pageInfo { hasNextPage } } } } } }"""
    edges = (await gql.ok(query, token=workspace.viewer))["agents"]["edges"]
    assert [e["node"]["runs"]["totalCount"] for e in edges] == [1, 2, 3]
    assert [e["node"]["runs"]["pageInfo"]["hasNextPage"] for e in edges] == [False, True, True]


async def test_steps_children_and_descendants_page(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    rows = Rows(sessionmaker, workspace.id)
    root = await rows.run(pk(agent["id"]))
    steps = [await rows.step(root, seq=i) for i in range(5)]
    children = [await rows.run(pk(agent["id"]), parent=root) for _ in range(3)]
    grandchild = await rows.run(pk(agent["id"]), parent=children[0])
    query = """query($id: ID!, $after: String) { run(id: $id) {
      stepsConnection(first: 2, after: $after) { totalCount edges { cursor node { seq } }
        pageInfo { hasNextPage endCursor } }
      childrenConnection(last: 2) { totalCount edges { node { id } } }
      descendantsConnection(first: 3) { totalCount edges { node { id } } pageInfo { hasNextPage } }
      steps { seq } children { id } descendants { id } } }"""
    seen: list[int] = []
    after = None
    while True:
        run = (await gql.ok(query, {"id": gid("Run", root.id), "after": after}, token=workspace.viewer))[
            "run"
        ]
        page = run["stepsConnection"]
        assert page["totalCount"] == 5
        seen += [e["node"]["seq"] for e in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert seen == [s.seq for s in steps]
    assert [s["seq"] for s in run["steps"]] == seen
    assert ids(run["childrenConnection"]) == [gid("Run", c.id) for c in children[1:]]
    assert run["childrenConnection"]["totalCount"] == 3
    tree = [gid("Run", r.id) for r in [*children, grandchild]]  # breadth first
    assert [r["id"] for r in run["descendants"]] == tree
    assert ids(run["descendantsConnection"]) == tree[:3]
    assert run["descendantsConnection"]["totalCount"] == 4
    assert run["descendantsConnection"]["pageInfo"]["hasNextPage"] is True


async def test_revisions_page_and_the_list_holds_one_page(
    settings: Settings, workspace: Any, sessionmaker: Any
) -> None:
    # With pages of at most 3, `revisions` holds the first 3; the connection has all 5.
    application = create_app(settings.model_copy(update={"max_page_size": 3}))
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://enverif.test") as http:
            gql = GraphQLClient(http)
            agent = await create_agent(gql, workspace.admin)
            memory = await create_memory(gql, workspace.operator, agent["id"], value="v0")
            update = "mutation($id: ID!, $v: String!) { updateMemory(id: $id, input: {value: $v}) { id } }"
            for i in range(1, 5):
                await gql.ok(update, {"id": memory["id"], "v": f"v{i}"}, token=workspace.operator)
            query = """query($id: ID!, $after: String) { node(id: $id) { ... on Memory {
              revisions { newValue actor { kind id } apiTokenId }
              revisionsConnection(first: 3, after: $after) { totalCount edges { node { newValue } }
                pageInfo { hasNextPage endCursor } } } } }"""
            first = (await gql.ok(query, {"id": memory["id"]}, token=workspace.viewer))["node"]
            assert [r["newValue"] for r in first["revisions"]] == ["v0", "v1", "v2"]
            # issue 27 item 9: who made a change is an object, as `sourceRun` is.
            assert {(r["actor"]["kind"], r["actor"]["id"]) for r in first["revisions"]} == {
                ("TOKEN", first["revisions"][0]["apiTokenId"])
            }
            page = first["revisionsConnection"]
            assert page["totalCount"] == 5 and page["pageInfo"]["hasNextPage"] is True
            after = page["pageInfo"]["endCursor"]
            rest = (await gql.ok(query, {"id": memory["id"], "after": after}, token=workspace.viewer))["node"]
            assert [e["node"]["newValue"] for e in rest["revisionsConnection"]["edges"]] == ["v3", "v4"]

            # Priced by what they can hold: 3 steps per run of a 3-run page, not the old 10.
            cost = await gql.raw(
                "{ runs(first: 3) { edges { node { steps { id } children { steps { id } } } } } }",
                token=workspace.viewer,
            )
            assert not cost.get("errors"), cost


@pytest.fixture
async def small_server(settings: Settings) -> AsyncIterator[str]:
    async with serve(
        create_app(settings.model_copy(update={"max_response_bytes": 65_536})), lifespan="on"
    ) as url:
        yield url


async def test_a_websocket_result_over_the_byte_cap_is_refused(
    small_server: str, gql: Any, workspace: Any
) -> None:
    for i in range(3):
        await create_agent(gql, workspace.admin, description=f"{i}" + "d" * 30_000)
    query = "query($n: Int) { agents(first: $n) { edges { node { description } } } }"
    client = await GraphQLWS.open(small_server.replace("http://", "ws://") + "/graphql", workspace.viewer)
    try:
        refused = await client.execute("1", query, {"n": 3})
        assert refused["data"] is None
        (error,) = refused["errors"]
        assert error["extensions"] == {"code": "VALIDATION_FAILED"}
        assert "over the limit of 65536" in error["message"]
        served = await client.execute("2", query, {"n": 1})  # 30 KB: whole, on the same socket
        assert len(served["data"]["agents"]["edges"][0]["node"]["description"]) == 30_001
    finally:
        await client.close()
