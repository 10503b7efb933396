"""Agents through GraphQL: create, read, update, and every way a write can be refused."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.graphql import CREATE_AGENT, SCRIPTED, create_agent, unique

UPDATE_AGENT = """
mutation($id: ID!, $input: UpdateAgentInput!) {
  updateAgent(id: $id, input: $input) {
    id name description instructions status model tools
    policy { default rules { tool decision } } memoryBudget { maxItems maxChars } updatedAt
  }
}
"""

AGENT = """
query($id: ID!) {
  agent(id: $id) {
    id name description instructions status model tools
    policy { default rules { tool decision } } memoryBudget { maxItems maxChars }
    schedules { id } runs { edges { node { id } } } memories { edges { node { id } } }
  }
}
"""


async def test_create_agent_with_every_field_and_read_it_back(gql: Any, workspace: Any) -> None:
    name = unique("writer")
    created = await create_agent(
        gql,
        workspace.admin,
        name=name,
        description="Writes things",
        instructions="You are careful.",
        tools=["memory.*", "http.get", "memory.*"],
        policy={"default": "REQUIRE_APPROVAL", "rules": [{"tool": "memory.*", "decision": "ALLOW"}]},
        memoryBudget={"maxItems": 5, "maxChars": 1000},
        status="PAUSED",
    )
    assert created["name"] == name
    assert created["status"] == "PAUSED"
    assert created["tools"] == ["memory.*", "http.get"]  # duplicates dropped, order kept
    assert created["policy"] == {
        "default": "REQUIRE_APPROVAL",
        "rules": [{"tool": "memory.*", "decision": "ALLOW"}],
    }
    assert created["memoryBudget"] == {"maxItems": 5, "maxChars": 1000}
    assert created["model"] == SCRIPTED

    fetched = (await gql.ok(AGENT, {"id": created["id"]}, token=workspace.viewer))["agent"]
    assert fetched["description"] == "Writes things"
    assert fetched["instructions"] == "You are careful."
    assert fetched["schedules"] == []
    assert fetched["runs"]["edges"] == []
    assert fetched["memories"]["edges"] == []


async def test_defaults(gql: Any, workspace: Any) -> None:
    created = await create_agent(gql, workspace.admin)
    assert created["status"] == "ACTIVE"
    assert created["tools"] == []
    assert created["policy"] == {"default": None, "rules": []}
    assert created["memoryBudget"] == {"maxItems": 20, "maxChars": 4000}
    assert created["description"] is None


async def test_update_changes_only_given_fields(gql: Any, workspace: Any) -> None:
    created = await create_agent(gql, workspace.admin, description="old", instructions="keep me")
    updated = (
        await gql.ok(
            UPDATE_AGENT,
            {
                "id": created["id"],
                "input": {"description": None, "memoryBudget": {"maxItems": 7}, "status": "ARCHIVED"},
            },
            token=workspace.admin,
        )
    )["updateAgent"]
    assert updated["description"] is None  # explicit null clears
    assert updated["instructions"] == "keep me"  # omitted: kept
    assert updated["memoryBudget"] == {"maxItems": 7, "maxChars": 4000}
    assert updated["status"] == "ARCHIVED"
    assert updated["name"] == created["name"]
    assert updated["updatedAt"] >= created["updatedAt"]


async def test_rename_and_policy_update(gql: Any, workspace: Any) -> None:
    created = await create_agent(gql, workspace.admin)
    new_name = unique("renamed")
    updated = (
        await gql.ok(
            UPDATE_AGENT,
            {
                "id": created["id"],
                "input": {"name": new_name, "policy": {"rules": [{"tool": "*", "decision": "DENY"}]}},
            },
            token=workspace.admin,
        )
    )["updateAgent"]
    assert updated["name"] == new_name
    assert updated["policy"] == {"default": None, "rules": [{"tool": "*", "decision": "DENY"}]}


async def test_policy_patterns_are_trimmed_and_case_folded_and_must_match_a_tool(
    gql: Any, workspace: Any
) -> None:
    created = await create_agent(
        gql,
        workspace.admin,
        tools=[" HTTP.get", "webhook.post"],
        policy={
            "rules": [{"tool": " Webhook.POST ", "decision": "DENY"}, {"tool": "HTTP.*", "decision": "ALLOW"}]
        },
    )
    assert created["tools"] == ["http.get", "webhook.post"]
    assert created["policy"]["rules"] == [
        {"tool": "webhook.post", "decision": "DENY"},
        {"tool": "http.*", "decision": "ALLOW"},
    ]
    # A rule that matches no tool of this server decides nothing: refused, named.
    error = await gql.error(
        UPDATE_AGENT,
        {"id": created["id"], "input": {"policy": {"rules": [{"tool": "webhok.post", "decision": "DENY"}]}}},
        token=workspace.admin,
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "policy"}
    assert "policy.rules[0].tool 'webhok.post' matches no tool" in error["message"]
    assert "webhook.post" in error["message"]  # the tools there are, to pick from
    # A rule for a tool this agent does not offer itself is a ceiling for its delegates: kept.
    updated = await gql.ok(
        UPDATE_AGENT,
        {
            "id": created["id"],
            "input": {"policy": {"rules": [{"tool": "memory.forget", "decision": "DENY"}]}},
        },
        token=workspace.admin,
    )
    assert updated["updateAgent"]["policy"]["rules"] == [{"tool": "memory.forget", "decision": "DENY"}]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "has space"}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"description": "d" * 100_001}, "description"),
        ({"instructions": "i" * 100_001}, "instructions"),
        ({"model": {"provider": "nope"}}, "model.provider"),
        ({"model": "scripted"}, "model"),
        ({"tools": [""]}, "tools"),
        ({"memoryBudget": {"maxItems": 201}}, "memoryBudget.maxItems"),
        ({"memoryBudget": {"maxChars": -1}}, "memoryBudget.maxChars"),
    ],
)
async def test_create_validation_names_the_field_and_writes_nothing(
    gql: Any, workspace: Any, fields: dict[str, Any], field: str
) -> None:
    agent_input = {"name": unique("agent"), "model": SCRIPTED, **fields}
    error = await gql.error(CREATE_AGENT, {"input": agent_input}, token=workspace.admin)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": field}
    listed = await gql.ok("{ agents { edges { node { name } } } }", token=workspace.admin)
    assert listed["agents"]["edges"] == []


async def test_duplicate_name_is_a_conflict_case_insensitively(gql: Any, workspace: Any) -> None:
    first = await create_agent(gql, workspace.admin)
    error = await gql.error(
        CREATE_AGENT, {"input": {"name": first["name"].upper(), "model": SCRIPTED}}, token=workspace.admin
    )
    assert error["extensions"] == {"code": "CONFLICT", "field": "name"}

    second = await create_agent(gql, workspace.admin)
    error = await gql.error(
        UPDATE_AGENT, {"id": second["id"], "input": {"name": first["name"]}}, token=workspace.admin
    )
    assert error["extensions"] == {"code": "CONFLICT", "field": "name"}
    # Renaming an agent to its own name is not a conflict.
    await gql.ok(UPDATE_AGENT, {"id": second["id"], "input": {"name": second["name"]}}, token=workspace.admin)


async def test_same_name_in_another_workspace_is_fine(gql: Any, workspace: Any, make_workspace: Any) -> None:
    other = await make_workspace()
    first = await create_agent(gql, workspace.admin)
    again = await create_agent(gql, other.admin, name=first["name"])
    assert again["name"] == first["name"]


async def test_failed_update_changes_nothing(gql: Any, workspace: Any) -> None:
    created = await create_agent(gql, workspace.admin, description="before")
    error = await gql.error(
        UPDATE_AGENT,
        # A valid description next to an invalid policy: neither may be written.
        {
            "id": created["id"],
            "input": {"description": "after", "policy": {"rules": [{"tool": " ", "decision": "DENY"}]}},
        },
        token=workspace.admin,
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "policy"}
    fetched = (await gql.ok(AGENT, {"id": created["id"]}, token=workspace.admin))["agent"]
    assert fetched["description"] == "before"


async def test_null_for_a_required_patch_field_is_rejected(gql: Any, workspace: Any) -> None:
    created = await create_agent(gql, workspace.admin)
    error = await gql.error(
        UPDATE_AGENT, {"id": created["id"], "input": {"name": None}}, token=workspace.admin
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "name"}


@pytest.mark.parametrize("role", ["operator", "viewer"])
async def test_only_admins_write_agents(gql: Any, workspace: Any, role: str) -> None:
    error = await gql.error(
        CREATE_AGENT, {"input": {"name": unique("agent"), "model": SCRIPTED}}, token=workspace.token(role)
    )
    assert error["extensions"]["code"] == "FORBIDDEN"
    created = await create_agent(gql, workspace.admin)
    error = await gql.error(
        UPDATE_AGENT, {"id": created["id"], "input": {"name": "x"}}, token=workspace.token(role)
    )
    assert error["extensions"]["code"] == "FORBIDDEN"


async def test_agents_filter_by_status(gql: Any, workspace: Any) -> None:
    active = await create_agent(gql, workspace.admin)
    paused = await create_agent(gql, workspace.admin, status="PAUSED")
    query = "query($s: AgentStatus) { agents(status: $s) { edges { node { id } } } }"
    got = await gql.ok(query, {"s": "PAUSED"}, token=workspace.viewer)
    assert [e["node"]["id"] for e in got["agents"]["edges"]] == [paused["id"]]
    got = await gql.ok(query, {"s": None}, token=workspace.viewer)
    assert [e["node"]["id"] for e in got["agents"]["edges"]] == [paused["id"], active["id"]]
