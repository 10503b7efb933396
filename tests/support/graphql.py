"""Creating things through the API as a client would, for tests: the one ``CREATE_AGENT``
(and ``CREATE_MEMORY``), ids, and unique names.

``create_agent`` returns the agent as GraphQL answers it; ``tests.support.runs.scripted_agent``
builds on it for run tests (an agent that follows scripted steps, by id). ``doubling`` writes
the fragment bomb the document shape limits refuse (app/graphql/shape.py).
"""

from __future__ import annotations

import uuid
from typing import Any

from app.graphql.ids import parse_global_id, to_global_id

SCRIPTED = {"provider": "scripted", "steps": [{"final": "done"}]}

AGENT_FIELDS = """
    id name description instructions status model tools
    policy { default rules { tool decision } }
    memoryBudget { maxItems maxChars }
    createdAt updatedAt
"""
CREATE_AGENT = f"""
mutation($input: CreateAgentInput!) {{
  createAgent(input: $input) {{ {AGENT_FIELDS} }}
}}
"""
CREATE_MEMORY = """
mutation($agentId: ID!, $input: MemoryInput!) {
  createMemory(agentId: $agentId, input: $input) { id key value tags importance sourceRun { id } }
}
"""


def unique(prefix: str = "a") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def pk(global_id: str) -> int:
    """The database id inside a GraphQL id."""
    parsed = parse_global_id(global_id)
    assert parsed is not None, global_id
    return parsed[1]


def gid(type_name: str, row_id: int) -> str:
    return to_global_id(type_name, row_id)


async def create_agent(gql: Any, token: str, *, name: str | None = None, **fields: Any) -> dict[str, Any]:
    """``createAgent`` with ``fields`` as its input (a unique name and a one-step scripted
    model unless given); returns the agent as the API answers it."""
    agent_input = {"name": name or unique("agent"), "model": SCRIPTED, **fields}
    data = await gql.ok(CREATE_AGENT, {"input": agent_input}, token=token)
    agent: dict[str, Any] = data["createAgent"]
    return agent


async def create_memory(gql: Any, token: str, agent_id: str, **fields: Any) -> dict[str, Any]:
    memory_input = {"key": unique("key"), "value": "some value", **fields}
    data = await gql.ok(CREATE_MEMORY, {"agentId": agent_id, "input": memory_input}, token=token)
    memory: dict[str, Any] = data["createMemory"]
    return memory


def doubling(levels: int, *, aliased: bool, operation: str = "") -> str:
    """Fragments that each spread the previous one twice: 2^levels fields once expanded."""
    leaf = "a: id" if aliased else "id"
    lines = [f"fragment f0 on Run {{ {leaf} }}"]
    for i in range(1, levels + 1):
        extra = f"a{i}: id " if aliased else ""
        lines.append(f"fragment f{i} on Run {{ {extra}...f{i - 1} ...f{i - 1} }}")
    root = operation or f"query {{ runs(first: 1) {{ edges {{ node {{ ...f{levels} }} }} }} }}"
    return root + "\n" + "\n".join(lines)
