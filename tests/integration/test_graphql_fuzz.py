"""Schemathesis fuzzing of every query and mutation in schema.graphql against a real uvicorn
serving the app: no 5xx, and every error a client sees carries a code that is not INTERNAL
(an INTERNAL is an unexpected exception: a bug the fuzzer found).

Bounded: ``EXAMPLES_PER_OPERATION`` generated documents per root field (a few hundred cases
in all), derandomized so that CI runs the same cases every time.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import graphql
import hypothesis_graphql.nodes as nodes
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from app.main import create_app
from app.settings import Settings
from tests.support.graphql import create_agent, create_memory
from tests.support.servers import serve

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "schema.graphql"
EXAMPLES_PER_OPERATION = 15

json_keys = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(json_keys, children, max_size=4),
    max_leaves=12,
)
START_RUN = "mutation($agent: ID!) { startRun(agentId: $agent) { id } }"
SCRIPTED_MODEL = {"provider": "scripted", "steps": [{"final": "done"}]}


def to_node(value: Any) -> graphql.ValueNode:
    """A JSON value as a GraphQL literal (what schemathesis puts into the document)."""
    if value is None:
        return nodes.Null
    if isinstance(value, bool):
        return nodes.Boolean(value)
    if isinstance(value, int):
        return nodes.Int(value)
    if isinstance(value, float):
        return nodes.Float(value)
    if isinstance(value, str):
        return nodes.String(value)
    if isinstance(value, list):
        return nodes.List([to_node(v) for v in value])
    return nodes.Object(
        [graphql.ObjectFieldNode(name=graphql.NameNode(value=k), value=to_node(v)) for k, v in value.items()]
    )


# Our one custom scalar without a built-in strategy; a valid model config half the time, so
# that createAgent gets past validation too.
schemathesis.graphql.scalar("JSON", (st.just(SCRIPTED_MODEL) | json_values).map(to_node))


def check_response(status: int, text: str) -> None:
    assert status < 500, f"{status}: {text[:500]}"
    body = json.loads(text)
    for error in body.get("errors") or ():
        code = (error.get("extensions") or {}).get("code")
        assert code, f"error without a code: {error}"
        assert code != "INTERNAL", f"unexpected server error: {error}"
        assert "Traceback" not in error["message"]


def fuzz(base_url: str, token: str, ids: list[str]) -> tuple[int, dict[str, int], list[str]]:
    """Runs in a worker thread (schemathesis calls are blocking); returns the number of cases
    sent, how often each error code came back, and the failures."""
    # Ids of real objects most of the time: random ones only ever reach NOT_FOUND.
    schemathesis.graphql.scalar("ID", (st.sampled_from(ids) | st.text(max_size=12)).map(nodes.String))
    schema = schemathesis.graphql.from_path(str(SCHEMA_FILE))
    failures: list[str] = []
    codes: dict[str, int] = {}
    sent = 0
    for result in schema.get_all_operations():
        operation = result.ok()

        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def run(case: Any) -> None:
            nonlocal sent
            response = case.call(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
            sent += 1
            try:
                check_response(response.status_code, response.text)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{case.body}") from None
            for error in response.json().get("errors") or ():
                code = error["extensions"]["code"]
                codes[code] = codes.get(code, 0) + 1

        try:
            run()
        except AssertionError as exc:
            failures.append(f"{operation.label}: {exc}")
    return sent, codes, failures


@pytest.mark.slow
async def test_fuzzed_operations_never_fail_the_server(settings: Settings, gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    memory = await create_memory(gql, workspace.operator, agent["id"])
    started = await gql.ok(START_RUN, {"agent": agent["id"]}, token=workspace.operator)
    ids = [agent["id"], memory["id"], started["startRun"]["id"]]
    app = create_app(settings)
    async with app.router.lifespan_context(app), serve(app) as base:
        # The server runs in this event loop; the blocking fuzzer runs beside it in a thread.
        sent, codes, failures = await asyncio.to_thread(fuzz, f"{base}/graphql", workspace.admin, ids)
    assert not failures, "\n\n".join(failures)
    print(f"fuzzing: {sent} cases, error codes {codes}")
    assert sent >= 100  # it really ran
