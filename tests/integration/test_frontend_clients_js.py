"""The frontend clients a browser app uses, in node against a real uvicorn and worker, on the
demo-like three-level tree with an approval (docs/graphql/frontends.md):

- Apollo Client 4: the manual's client (docs/examples/apollo_client.mjs) driven by
  tests/js/apollo_flow.mjs. It starts the run, follows ``runTree`` over ``GraphQLWsLink`` to
  ``complete`` approving mid-stream, reads the run's detail, keeps ``Delegation.task`` in the
  normalised cache when another query selects other ``Delegation`` fields, and pages ``runs``
  with ``relayStylePagination``.
- urql with graphcache and no ``keys`` configuration (tests/js/urql_flow.mjs): the same tree
  through the graphql-ws subscription exchange, the agent's ``Policy``, ``PolicyRule`` and
  ``MemoryBudget``, the ``Delegation`` case, and ``relayPagination``.

A failed step, or any warning the client logs (Apollo's lost cache data, graphcache's
unkeyable objects), makes the program exit 1."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from app.main import create_app
from app.settings import Settings
from tests.conftest import WorkspaceFixture
from tests.support.js import JS_DIR, beside_js_packages
from tests.support.live import demo_tree_agents, http_gql
from tests.support.runs import RUN
from tests.support.servers import serve, sink_server
from tests.support.workers import spawn_worker
from tests.support.ws import ws_url

NODE_TIMEOUT_S = 120
# A rule on the lead agent, so that the urql flow reads a PolicyRule (the tree calls no http.get).
GIVE_RULE = """
mutation($id: ID!) {
  updateAgent(id: $id, input: {policy: {rules: [{tool: "http.get", decision: ALLOW}]}}) { id }
}
"""
EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"

FLOWS = {
    "apollo": ([EXAMPLES / "apollo_client.mjs"], ["runTree", "detail", "delegation", "paging"]),
    "urql": ([], ["runTree", "agent", "delegation", "paging"]),
}


@pytest.mark.parametrize("client", sorted(FLOWS))
async def test_frontend_client_watches_approves_pages_and_keeps_its_cache(
    client: str, settings: Settings, workspace: WorkspaceFixture, tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:  # fmt: skip
    modules, steps = FLOWS[client]
    modules = [*modules, JS_DIR / "flow.mjs"]
    program = JS_DIR / f"{client}_flow.mjs"
    flow = beside_js_packages(tmp_path, *modules, program) / program.name
    processes.append(spawn_worker(settings))
    async with serve(create_app(settings), lifespan="on") as api, sink_server() as (sink, url):
        gql = http_gql(api)
        tree = await demo_tree_agents(gql, workspace.admin, url + "/hook")
        await gql.ok(GIVE_RULE, {"id": tree.lead_agent_id}, token=workspace.admin)
        # Not subprocess.run: the server runs in this very event loop.
        node = await asyncio.create_subprocess_exec(
            "node", str(flow), api + "/graphql", ws_url(api), tree.lead_agent_id,
            env={**os.environ, "ENVERIF_TOKEN": workspace.operator},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(NODE_TIMEOUT_S):
            stdout, stderr = await node.communicate()
        lines = [json.loads(line) for line in stdout.splitlines()]
        assert node.returncode == 0, (lines, stderr.decode())
        root = lines[0]["root"]
        run = (await gql.ok(RUN, {"id": root}, token=workspace.operator))["run"]
    assert [line.get("step") for line in lines[:-1]] == steps
    assert lines[-1] == {"done": True}
    assert lines[-2]["runs"] == 3  # the root and its two delegations
    if client == "urql":
        assert lines[1] == {"step": "agent", "rules": 1}  # the PolicyRule GIVE_RULE wrote
    assert run["status"] == "SUCCEEDED"
    assert len(sink.deliveries) == 1  # the approved webhook, posted once
