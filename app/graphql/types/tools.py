"""ToolDescriptor: a tool an agent can be offered, with the JSON Schema of its arguments
(``app.services.tool_catalog``)."""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.scalars import JSON

from app.domain.global_ids import encode_text
from app.domain.policy import RiskClass
from app.graphql.types import enums as _enums  # noqa: F401  (registers the GraphQL enums)
from app.services.tool_catalog import ToolInfo


@strawberry.type(
    name="ToolDescriptor",
    description="A tool an agent can be offered: a built-in, a plugin's, or an MCP server's (docs/extending/tools.md).",
)
class ToolDescriptor:
    id: strawberry.ID = strawberry.field(
        description="Stable for the tool's name within a workspace (a cache's key; not a node)."
    )
    name: str = strawberry.field(
        description="The tool's name, as policies and agents' tools patterns match it."
    )
    description: str | None = strawberry.field(description="What the tool does, as the model is told.")
    risk: RiskClass = strawberry.field(
        description="Its risk class: what the policy decides when no rule matches."
    )
    input_schema: JSON = strawberry.field(
        description="The JSON Schema its arguments must match (decideApproval checks an EDIT against it)."
    )
    server: str | None = strawberry.field(
        description="The MCP server it comes from; null: registered by the workers."
    )

    @classmethod
    def of(cls, info: ToolInfo) -> ToolDescriptor:
        schema: Any = info.input_schema  # the JSON scalar passes a stored value through
        return cls(id=strawberry.ID(encode_text(f"ToolDescriptor:{info.name}")), name=info.name, description=info.description, risk=info.risk,
                   input_schema=schema, server=info.server)  # fmt: skip
